#!/usr/bin/env bash
# Runs the README's C++ examples (built from README.md as it is by the readme_* targets) against
# a database of their own, and checks they do what the README says:
#   readme_examples.sh READMEWORKER READMECLIENT
set -uo pipefail

worker=$1
client=$2
db="hopper_readme_$$"
fails=0

psql_admin() { psql -X -q -v ON_ERROR_STOP=1 -d postgres "$@"; }
psql_admin -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" -c "CREATE DATABASE \"$db\"" || exit 1
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    psql_admin -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1
}
trap cleanup EXIT
export PGDATABASE=$db
sql() { psql -X -A -t -q -v ON_ERROR_STOP=1 -c "$1"; }
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}
expect() {  # SQL EXPECTED WHAT
    local got
    got=$(sql "$1")
    [ "$got" = "$2" ] || fail "$3: expected '$2', got '$got'"
}
# eventually SQL EXPECTED: polls for up to 20 s.
eventually() {
    for _ in $(seq 200); do
        [ "$(sql "$1")" = "$2" ] && return 0
        sleep 0.1
    done
    return 1
}
push() { sql "SELECT hopper.queue_push($1)"; }

# The tables the examples write to: blocks 3, 4 and 5 share "invoices".
sql "CREATE EXTENSION hopper" || exit 1
sql "CREATE TABLE videos (id serial PRIMARY KEY, path text NOT NULL, status text)"
sql "CREATE TABLE invoices (id int PRIMARY KEY, sent boolean NOT NULL DEFAULT false)"
sql "INSERT INTO invoices SELECT generate_series(1, 5)"

# Block 2: the row and the job together, then wait_for hears the job finish.
out=$(timeout 60 "$client" push) || fail "push example exited $?"
[[ $out =~ ^job\ ([0-9]+)\ completed$ ]] || fail "push example printed '$out'"
expect "SELECT path FROM videos" "/videos/a.mp4" "the video row"
expect "SELECT payload->>'video_id' FROM hopper.job_status(${BASH_REMATCH[1]:-0})" \
    "$(sql "SELECT id FROM videos")" "the job's payload names the row"

# Block 3: the updates and the completions commit together.
a=$(push "'invoices', '{\"invoice\": 1}'")
b=$(push "'invoices', '{\"invoice\": 2}'")
timeout 60 "$client" take || fail "take example exited $?"
expect "SELECT string_agg(sent::text, ',' ORDER BY id) FROM invoices WHERE id <= 2" "true,true" \
    "invoices sent by the take"
expect "SELECT state FROM hopper.job_status($a) UNION ALL SELECT state FROM hopper.job_status($b)" \
    $'completed\ncompleted' "jobs completed by the take's commit"

# Block 4: the good job completes with its work; the failing one is back in the queue with its
# attempt counted, its work undone.
good=$(push "'invoices', '{\"invoice\": 3}'")
bad=$(push "'invoices', '{\"invoice\": 4, \"bad\": true}'")
timeout 60 "$client" fail_taken || fail "fail_taken example exited $?"
expect "SELECT string_agg(sent::text, ',' ORDER BY id) FROM invoices WHERE id IN (3, 4)" \
    "true,false" "the good invoice sent, the bad one not"
expect "SELECT state FROM hopper.job_status($good)" "completed" "the good job"
expect "SELECT state IN ('available', 'scheduled') AND attempt = 1 AND last_error = 'cannot render'
        FROM hopper.job_status($bad)" "t" "the failed job, back in the queue"

# Block 5: a TakeWorker sends the invoice, and SIGTERM ends run().
send=$(push "'invoices', '{\"invoice\": 5}', kind => 'send'")
"$client" take_worker >"$PWD/readme_take_worker.out.$$" 2>&1 &
pid=$!
pids+=("$pid")
eventually "SELECT state FROM hopper.job_status($send)" completed ||
    fail "the TakeWorker example did not complete its job: $(cat "$PWD/readme_take_worker.out.$$")"
expect "SELECT sent FROM invoices WHERE id = 5" "t" "the invoice the TakeWorker sent"
kill -TERM "$pid"
wait "$pid" || fail "the TakeWorker example exited $? on SIGTERM"
grep -q '^returned$' "$PWD/readme_take_worker.out.$$" || fail "run() did not return on SIGTERM"
rm -f "$PWD/readme_take_worker.out.$$"

# Block 1: a job with a path completes with its result and progress; one without goes dead at
# once; SIGINT lets a running job finish, then run() returns.
ok=$(push "'images', '{\"path\": \"/img/a.png\"}', kind => 'resize'")
nopath=$(push "'images', '{\"file\": \"/img/b.png\"}', kind => 'resize'")
"$worker" >"$PWD/readme_worker.out.$$" 2>&1 &
pid=$!
pids+=("$pid")
eventually "SELECT state FROM hopper.job_status($ok)" completed ||
    fail "the worker example did not complete its job: $(cat "$PWD/readme_worker.out.$$")"
expect "SELECT result::text || ' ' || progress || ' ' || progress_detail::text
        FROM hopper.job_status($ok)" '{"resized": true} 1 {"tiles": 10}' "the resized job"
eventually "SELECT state FROM hopper.job_status($nopath)" dead || fail "the job without a path"
expect "SELECT attempt || ' ' || last_error FROM hopper.job_status($nopath)" \
    "1 payload has no path" "the job without a path, dead at its first attempt"
running=$(push "'images', '{\"path\": \"/img/c.png\"}', kind => 'resize'")
eventually "SELECT state FROM hopper.job_status($running)" running || fail "the third job started"
kill -INT "$pid"
wait "$pid" || fail "the worker example exited $? on SIGINT"
expect "SELECT state FROM hopper.job_status($running)" "completed" "the job running at SIGINT"
rm -f "$PWD/readme_worker.out.$$"

[ "$fails" -eq 0 ] && echo "ok: the README's C++ examples"
exit $((fails > 0))
