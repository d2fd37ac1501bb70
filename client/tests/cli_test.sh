#!/usr/bin/env bash
# Runs one case of the hopper command-line tests against a database of its own:
#   cli_test.sh /path/to/hopper CASE
# Each case checks what the tool prints and the exit code it returns.
set -uo pipefail

hopper=$1
case_name=$2
db="hopper_cli_${case_name}_$$"
fails=0

psql_admin() { psql -X -q -v ON_ERROR_STOP=1 -d postgres "$@"; }
psql_admin -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" -c "CREATE DATABASE \"$db\"" || exit 1
trap 'psql_admin -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1' EXIT
psql -X -q -v ON_ERROR_STOP=1 -d "$db" -c "CREATE EXTENSION hopper" || exit 1
export PGDATABASE=$db

out="" err="" rc=0
# run ARGS...: runs the tool, keeping stdout, stderr and the exit code.
run() {
    local e
    e=$(mktemp)
    out=$("$hopper" "$@" 2>"$e")
    rc=$?
    err=$(cat "$e")
    rm -f "$e"
}
fail() {
    echo "FAIL [$case_name]: $*"
    echo "  stdout: $out"
    echo "  stderr: $err"
    echo "  exit:   $rc"
    fails=$((fails + 1))
}
expect_rc() { [ "$rc" -eq "$1" ] || fail "expected exit $1 from: $2"; }
expect_out() { grep -qE -- "$1" <<<"$out" || fail "stdout lacks /$1/ ($2)"; }
expect_err() { grep -qE -- "$1" <<<"$err" || fail "stderr lacks /$1/ ($2)"; }
sql() { psql -X -A -t -q -v ON_ERROR_STOP=1 -c "$1"; }

case $case_name in
push_and_show)
    run push emails '{"to": "a@example.com"}' --kind welcome --priority -2 --max-attempts 3
    expect_rc 0 push
    [[ $out =~ ^[0-9]+$ ]] || fail "push prints the bare job id"
    id=$out
    run show "$id"
    expect_rc 0 show
    expect_out "^job $id\$" "header"
    expect_out "kind +welcome" "kind"
    expect_out "state +available" "state"
    expect_out "attempt +0 of 3" "attempts"
    expect_out "priority +-2" "priority"
    expect_out 'payload +\{"to": "a@example.com"\}' "payload"
    run show "$id" --json
    expect_rc 0 "show --json"
    [ "$(sql "SELECT ('$out'::jsonb)->>'state'")" = available ] || fail "show --json state"
    [ "$(sql "SELECT ('$out'::jsonb)->'payload'->>'to'")" = a@example.com ] || fail "show --json payload"
    run push emails '{"n": 1}' --run-at +1h --dedup-key k1 --concurrency-key c1 --json
    expect_rc 0 "push --json"
    id2=$(sql "SELECT ('$out'::jsonb)->>'id'")
    [ "$(sql "SELECT state FROM hopper.job_status($id2)")" = scheduled ] || fail "--run-at +1h schedules"
    run push emails '{"n": 2}' --dedup-key k1
    [ "$out" = "$id2" ] || fail "the same dedup key returns the unfinished job"
    "$hopper" cancel "$id2" >/dev/null
    run push emails '{"n": 2}' --dedup-key k1 --dedup-window 10m
    expect_rc 0 "push --dedup-window"
    [ "$out" = "$id2" ] || fail "--dedup-window returns the finished job"
    run push emails '{"n": 2}' --dedup-key k1 --dedup-window 10
    expect_rc 1 "--dedup-window without a unit"
    expect_err "dedup-window needs a unit" "--dedup-window unit message"
    run push emails '{"n": 2}' --dedup-key k1
    [ "$out" != "$id2" ] || fail "without a window a finished job frees its key"
    # What the server would refuse in terms of its arguments and NULL: said of the option.
    for opt in kind dedup-key concurrency-key; do
        run push emails '{"n": 6}' --$opt ''
        expect_rc 1 "empty --$opt"
        expect_err "^hopper push: --$opt must not be empty \(leave the option out for none\)" "empty --$opt"
    done
    run push emails '{"n": 6}' --dedup-window 10m
    expect_rc 1 "--dedup-window without a key"
    expect_err "^hopper push: --dedup-window needs --dedup-key" "--dedup-window without a key"
    run push emails '{"n": 6}' --dedup-key k6 --dedup-window 0s
    expect_rc 1 "--dedup-window 0s"
    expect_err "^hopper push: --dedup-window must be a whole number from 1 " "--dedup-window 0s"
    grep -qE "NULL|dedup_window" <<<"$err" && fail "the server's wording: $err"
    [ "$(sql "SELECT count(*) FROM hopper.queue_jobs('emails', NULL, 100) WHERE payload->>'n' = '6'")" = 0 ] || fail "a refused push pushed"
    # Past the clock's range, or past what a push accepts: refused, never wrapped to another time.
    run push emails '{"n": 4}' --run-at '2611-09-01 00:00+00'
    expect_rc 1 "--run-at past the year 2262"
    expect_err "too far" "--run-at past the clock's range"
    run push emails '{"n": 4}' --run-at +213504d
    expect_rc 1 "--run-at +N days past 10 years"
    run push emails '{"n": 4}' --dedup-key k4 --dedup-window 213503983d
    expect_rc 1 "--dedup-window past 10 years"
    # Times the server refuses, or no time at all: the option named, exit 1 as any bad option,
    # never the server's wording for its function's argument.
    for bad in infinity -infinity 2100-01-01 1990-01-01 epoch; do
        run push emails '{"n": 5}' --run-at "$bad"
        expect_rc 1 "--run-at $bad"
        expect_err "^hopper push: --run-at (\"$bad\" is more than|must be a finite time)" "--run-at $bad named"
        expect_err "see hopper push --help" "--run-at $bad as a usage error"
        grep -qE "run_at|bigint" <<<"$err" && fail "--run-at $bad: the server's raw wording"
    done
    run push emails '{"n": 5}' --run-at 'next tuesday'
    expect_rc 1 "--run-at that is no time"
    expect_err "^hopper push: --run-at must be a timestamp .* got \"next tuesday\"" "--run-at syntax"
    [ "$(sql "SELECT count(*) FROM hopper.queue_jobs('emails', NULL, 100) WHERE payload->>'n' = '5'")" = 0 ] || fail "a refused --run-at pushes nothing"
    run push emails '{"n": 3}' --run-at '2030-01-02 03:04:05+00'
    expect_rc 0 "absolute --run-at"
    [ "$(sql "SELECT run_at = '2030-01-02 03:04:05+00' FROM hopper.job_status($out)")" = t ] || fail "absolute --run-at stored"
    ;;
stats)
    run stats
    expect_rc 0 "stats, no queues"
    expect_out "^QUEUE +AVAILABLE" "header"
    "$hopper" push alpha '{}' >/dev/null && "$hopper" push alpha '{}' >/dev/null
    "$hopper" push beta '{}' --run-at +1d >/dev/null
    run stats
    expect_out "^alpha +2 +0 +0 +0 +0 +0 +[0-9]+(ms|s) +no" "alpha row"
    expect_out "^beta +0 +1 +0" "beta row"
    run stats beta --json
    expect_rc 0 "stats --json"
    [ "$(sql "SELECT (('$out'::jsonb)->0->>'scheduled')")" = 1 ] || fail "stats --json scheduled"
    [ "$(sql "SELECT jsonb_array_length('$out'::jsonb)")" = 1 ] || fail "stats QUEUE shows one queue"
    run stats nosuch
    expect_rc 2 "unknown queue"
    expect_err 'queue "nosuch" does not exist' "message"
    ;;
jobs)
    a=$("$hopper" push work '{"a": 1}' --kind x)
    b=$("$hopper" push work '{"b": 2}')
    sql "SELECT hopper.queue_fail(id, lease_token, E'exploded\\nin two lines', permanent => true) FROM hopper.queue_pull('work', 1)" >/dev/null
    run jobs work
    expect_rc 0 jobs
    expect_out "^ID +STATE +KIND" "header"
    expect_out "^$b +available" "newest first, available"
    expect_out "^$a +dead +x +1/5 .*exploded in two lines" "dead job with its error, on one line"
    [ "$(grep -c . <<<"$out")" -eq 3 ] || fail "two jobs and a header"
    run jobs work --state dead --json
    expect_rc 0 "jobs --json"
    [ "$(sql "SELECT jsonb_array_length('$out'::jsonb)")" = 1 ] || fail "--state dead filters"
    [ "$(sql "SELECT ('$out'::jsonb)->0->>'last_error' = E'exploded\\nin two lines'")" = t ] || fail "--json last_error"
    # Columns line up by characters: "é" is two bytes but one column.
    "$hopper" push accents '{}' --kind 'vidéo-éèà' >/dev/null
    "$hopper" push accents '{}' --kind plain >/dev/null
    run jobs accents
    python3 -c '
import sys
lines = sys.stdin.buffer.read().decode().splitlines()
at = {lines[0].index("ATTEMPT")} | {l.index("0/5") for l in lines[1:]}
sys.exit(len(lines) != 3 or len(at) != 1)' <<<"$out" || fail "ATTEMPT column not aligned with a non-ASCII kind"
    run jobs work --limit 1
    [ "$(grep -c . <<<"$out")" -eq 2 ] || fail "--limit 1"
    run jobs work --state finished
    expect_rc 1 "bad state"
    expect_err "--state must be" "bad state message"
    run jobs work --limit 0
    expect_rc 1 "bad limit"
    run jobs nosuch
    expect_rc 2 "unknown queue"
    ;;
cancel_retry)
    id=$("$hopper" push q '{}')
    run cancel "$id"
    expect_rc 0 cancel
    expect_out "job $id cancelled" "cancel message"
    run cancel "$id"
    expect_rc 5 "cancel twice"
    run retry "$id"
    expect_rc 0 "retry cancelled"
    [ "$(sql "SELECT state FROM hopper.job_status($id)")" = available ] || fail "retried job is available"
    run retry "$id" --json
    expect_rc 5 "retry of an available job"
    expect_err "only dead or cancelled" "retry refusal message"
    expect_out '^\{"id": [0-9]+, "retried": false, "reason": ".*only dead or cancelled' "retry --json refusal"
    # A dedup key taken by a job pushed since: refused too (exit 5), saying which job holds it.
    kid=$("$hopper" push q '{}' --dedup-key shared)
    "$hopper" cancel "$kid" >/dev/null
    holder=$("$hopper" push q '{}' --dedup-key shared)
    run retry "$kid"
    expect_rc 5 "retry of a job whose key is held"
    expect_err "belongs to unfinished job $holder" "key holder named"
    run cancel 999999
    expect_rc 2 "cancel unknown"
    run retry 999999
    expect_rc 2 "retry unknown"
    ;;
wait)
    id=$("$hopper" push q '{}')
    run wait "$id" --timeout 1
    expect_rc 4 "wait times out"
    expect_out "still available" "timeout message"
    ( sleep 1; psql -X -q -c "SELECT hopper.queue_complete(id, lease_token, '{\"ok\": true}') FROM hopper.queue_pull('q', 1)" >/dev/null ) &
    run wait "$id" --timeout 60 --json
    wait
    expect_rc 0 "wait for completion"
    [ "$(sql "SELECT ('$out'::jsonb)->'result'->>'ok'")" = true ] || fail "wait --json result"
    id2=$("$hopper" push q '{}')
    "$hopper" cancel "$id2" >/dev/null
    run wait "$id2"
    expect_rc 6 "a cancelled job"
    expect_out "job $id2 cancelled" "cancelled message"
    run wait 999999 --timeout 1
    expect_rc 2 "unknown job"
    expect_err "^hopper: job 999999 does not exist" "an id never issued does not exist"
    # A job that finished on a queue keeping no history before the wait looked is gone, not
    # unknown: its id was issued.
    sql "SELECT hopper.queue_create('unkept', retention => '0')" >/dev/null
    id4=$("$hopper" push unkept '{}')
    sql "SELECT hopper.queue_complete(id, lease_token) FROM hopper.queue_pull('unkept', 1)" >/dev/null
    run wait "$id4" --timeout 5
    expect_rc 2 "a job finished unkept"
    expect_err "^hopper: job $id4 is gone: it finished on a queue that keeps no history" "gone, not unknown"
    # A job that failed once and then completed: the old error is history, not the outcome; show
    # lists every attempt's error.
    id3=$("$hopper" push q '{}')
    sql "SELECT hopper.queue_fail(id, lease_token, 'render failed', retry_in => '0') FROM hopper.queue_pull('q', 1)" >/dev/null
    sql "SELECT hopper.queue_fail(id, lease_token, 'disk full', retry_in => '0') FROM hopper.queue_pull('q', 1)" >/dev/null
    run show "$id3"
    expect_out 'errors .*render failed.*disk full' "show lists every attempt's error"
    sql "SELECT hopper.queue_complete(id, lease_token) FROM hopper.queue_pull('q', 1)" >/dev/null
    run wait "$id3" --timeout 5
    expect_rc 0 "wait for a job completed after failures"
    [ "$out" = "job $id3 completed" ] || fail "wait: a completed job shows no earlier error"
    for t in 1e9 -1 nan ''; do
        run wait "$id" --timeout "$t"
        expect_rc 1 "--timeout $t"
        expect_err "^hopper wait: --timeout must be a number of seconds from 0 to 31622400 \\(366 days\\), got \"$t\"" "--timeout $t: the range said"
    done
    ;;
exit_codes)
    run
    expect_rc 1 "no command"
    run frobnicate
    expect_rc 1 "unknown command"
    expect_err 'unknown command "frobnicate"' message
    run push onlyqueue
    expect_rc 1 "missing JSON"
    run push q '{}' --bogus 1
    expect_rc 1 "unknown option"
    run push q '[1, 2]'
    expect_rc 1 "payload not an object"
    expect_err "payload must be a JSON object" "server message"
    # JSON that is not: which argument, and where the server found it wrong.
    run push q '{"a": tru}'
    expect_rc 1 "invalid JSON"
    expect_err '^hopper push: JSON is not valid JSON: Token "tru" is invalid' "invalid JSON named"
    run push q '{"a":'
    expect_rc 1 "JSON cut short"
    expect_err "^hopper push: JSON is not valid JSON: The input string ended unexpectedly" "JSON cut short"
    # Nested deeper than the server parses: the payload's fault (exit 1), not the server's, and
    # no advice to raise the server's max_stack_depth.
    run push q "{\"a\": $(printf '%*s' 60000 '' | tr ' ' '[')$(printf '%*s' 60000 '' | tr ' ' ']')}"
    expect_rc 1 "JSON nested too deeply"
    expect_err "^hopper push: JSON is nested too deeply for the server to parse" "JSON nested too deeply"
    expect_err "see hopper push --help" "nested too deeply, as a usage error"
    grep -qE "max_stack_depth|stack depth" <<<"$err" && fail "the server's tuning hint: $err"
    run push q '{"a": "\u0000"}'
    expect_rc 1 "a JSON NUL"
    expect_err '^detail: \\u0000 cannot be converted to text' "the server's detail"
    run push q '{}' --priority abc
    expect_rc 1 "bad priority"
    run show notanumber
    expect_rc 1 "bad id"
    run show 1 2
    expect_rc 1 "two ids"
    expect_err 'unexpected argument "2"' "the extra argument named"
    run reaper status now
    expect_rc 1 "reaper status with an argument"
    expect_err 'unexpected argument "now"' "the extra argument named"
    run --db
    expect_rc 1 "--db without its value"
    expect_err "^hopper: --db needs a value" "what is missing, not the whole usage"
    run show 424242
    expect_rc 2 "unknown job"
    expect_err "job 424242 does not exist" "message"
    run stats --db "host=/nonexistent port=1"
    expect_rc 3 "no server"
    expect_err "could not connect" "connection message"
    run stats --db "dbname=postgres"
    expect_rc 7 "extension not installed"
    ;;
help)
    run --help
    expect_rc 0 "--help"
    expect_out "^Exit codes:" "exit codes documented"
    for c in push stats jobs show retry cancel wait watch reaper schedules; do
        run "$c" --help
        expect_rc 0 "$c --help"
        expect_out "^usage: hopper $c" "$c usage line"
    done
    ;;
watch)
    "$hopper" push vq '{}' >/dev/null
    "$hopper" push vq '{}' >/dev/null
    sql "SELECT hopper.queue_progress(id, lease_token, 0.4) FROM hopper.queue_pull('vq', 1, worker => 'w-1')" >/dev/null
    run watch --once
    expect_rc 0 "watch --once"
    expect_out "^vq +1 +0 +1 +0" "queue row"
    expect_out "running jobs:" "running section"
    expect_out " vq +- +1/5 +40% .* w-1" "running job with progress"
    grep -q $'\033' <<<"$out" && fail "--once does not clear the screen"
    run watch vq --interval 0.2 --count 2 --json
    expect_rc 0 "watch --json --count 2"
    [ "$(grep -c . <<<"$out")" -eq 2 ] || fail "one JSON object per refresh"
    last=$(tail -n 1 <<<"$out")
    [ "$(sql "SELECT ('$last'::jsonb)->'queues'->0->>'completed_per_s'")" = 0.000 ] || fail "rate after two refreshes"
    [ "$(sql "SELECT jsonb_array_length(('$last'::jsonb)->'running')")" = 1 ] || fail "running list"
    run watch nosuch --once
    expect_rc 2 "unknown queue"
    ;;
skewed_clock)
    # The machine running the tool is two hours behind the server: times counted from now are
    # the server's all the same.
    skewed() { HOPPER_TEST_SKEW_S=7200 LD_PRELOAD=$HOPPER_TEST_SKEW_LIB run "$@"; }
    skewed push sq '{}' --run-at +1h
    expect_rc 0 "push --run-at +1h"
    [ "$(sql "SELECT run_at BETWEEN now() + interval '55 min' AND now() + interval '65 min' FROM hopper.job_status($out)")" = t ] ||
        fail "--run-at +1h is an hour from the server's now: $(sql "SELECT run_at - now() FROM hopper.job_status($out)")"
    "$hopper" push sq '{}' >/dev/null
    sql "SELECT count(*) FROM hopper.queue_pull('sq', 1, worker => 'w-1')" >/dev/null
    skewed watch --once
    expect_rc 0 "watch --once"
    expect_out " sq +- +1/5 +- +[0-9]+(ms|s) +w-1" "running for a moment, not for minus two hours"
    ;;
far_times)
    # Times set by hand past the clock's end (2262), to the server's last year, or to infinity:
    # every command that reads the job still works, and none names a day the job was not set to.
    inf=$("$hopper" push fq '{}')
    last=$("$hopper" push fq '{}')
    started=$("$hopper" push fq '{}')
    sql "UPDATE hopper.jobs SET run_at = 'infinity' WHERE id = $inf" >/dev/null
    sql "UPDATE hopper.jobs SET run_at = '294276-12-31 00:00:00+00' WHERE id = $last" >/dev/null
    sql "SELECT hopper.queue_pull('fq', 1)" >/dev/null
    sql "UPDATE hopper.jobs SET started_at = '-infinity' WHERE id = $started" >/dev/null
    run show "$inf"
    expect_rc 0 "show of a job run at infinity"
    expect_out "run at +after 2262-04-11\$" "infinity shown as past the clock's end"
    run show "$last" --json
    expect_rc 0 "show --json of a job run in the year 294276"
    [ "$(sql "SELECT ('$out'::jsonb)->>'run_at'")" = infinity ] || fail "show --json run_at"
    run jobs fq
    expect_rc 0 "jobs listing far times"
    expect_out "^$inf +scheduled .* after 2262-04-11" "infinite run_at in the listing"
    expect_out "^$last +scheduled .* after 2262-04-11" "year 294276 in the listing"
    run jobs fq --json
    expect_rc 0 "jobs --json listing far times"
    [ "$(sql "SELECT string_agg(e->>'run_at', ',' ORDER BY (e->>'id')::int8) FILTER (WHERE e->>'state' = 'scheduled') FROM jsonb_array_elements('$out'::jsonb) e")" = \
        "infinity,infinity" ] || fail "far run_at in JSON"
    run watch fq --once
    expect_rc 0 "watch of a job started at -infinity"
    expect_out "^$started +fq +- +1/5 +- +- " "no running time counted from -infinity"
    # A time before 1970 with a fraction is in the second it falls in, not the one after it.
    early=$("$hopper" push fq70 '{}')
    sql "UPDATE hopper.jobs SET run_at = '1969-12-31 23:59:59.25+00' WHERE id = $early" >/dev/null
    run show "$early"
    expect_rc 0 "show of a job run at 1969-12-31 23:59:59.25"
    expect_out "run at +1969-12-31 23:59:59 UTC\$" "a second before 1970, not 1970 itself"
    run show "$early" --json
    expect_rc 0 "show --json of a job run at 1969-12-31 23:59:59.25"
    [ "$(sql "SELECT ('$out'::jsonb)->>'run_at'")" = 1969-12-31T23:59:59.250000Z ] ||
        fail "show --json run_at before 1970: $(sql "SELECT ('$out'::jsonb)->>'run_at'")"
    ;;
nonfinite_progress)
    # A progress set by hand to NaN or infinity (queue_progress refuses both): every --json output
    # that carries the job stays JSON, with null for it, and the text shows no percentage.
    nan=$("$hopper" push pq '{}')
    inf=$("$hopper" push pq '{}')
    sql "SELECT hopper.queue_pull('pq', 2)" >/dev/null
    sql "UPDATE hopper.jobs SET progress = 'NaN' WHERE id = $nan" >/dev/null
    sql "UPDATE hopper.jobs SET progress = '-Infinity' WHERE id = $inf" >/dev/null
    for args in "show $nan" "show $inf" "jobs pq" "wait $nan --timeout 0" "watch pq --once"; do
        # shellcheck disable=SC2086
        run $args --json
        [ "$rc" -eq 0 ] || [ "$rc" -eq 4 ] || fail "exit $rc from $args --json"
        python3 -c 'import json, sys; json.loads(sys.argv[1], parse_constant=lambda c: sys.exit("bare " + c))' "$out" ||
            fail "$args --json is not JSON"
    done
    run show "$nan" --json
    [ "$(sql "SELECT jsonb_typeof(('$out'::jsonb)->'progress')")" = null ] || fail "NaN progress not null"
    run show "$nan"
    expect_rc 0 "show of a NaN progress"
    grep -qi nan <<<"$out" && fail "show prints NaN as a percentage"
    run watch pq --once
    expect_out "^$nan +pq +- +1/5 +- " "no percentage in watch"
    ;;
control_chars)
    # Text a job carries (kind, worker, error, a dedup key quoted by the server) may hold control
    # characters: on a terminal, ESC [ 2 J clears the screen, ESC ] retitles the window, a C1 CSI
    # (U+009B) acts as ESC [. The tool shows them as escapes instead of sending them.
    id=$("$hopper" push cq '{}' --kind $'k\e]0;owned\a' --dedup-key $'key\e[2J')
    sql "SELECT hopper.queue_fail(id, lease_token, E'boom\\x1b[31m red\\r\\nline 2 \\u009b1m', permanent => true) FROM hopper.queue_pull('cq', 1, worker => E'w\\x1b[H')" >/dev/null
    # bad: stdout and stderr hold no raw ESC, BEL, CR or C1 CSI.
    bad() { LC_ALL=C grep -q $'[\e\a\r]\|\xc2\x9b' <<<"$out$err"; }
    for args in "jobs cq" "show $id" "wait $id --timeout 1" "watch cq --once"; do
        # shellcheck disable=SC2086
        run $args
        bad && fail "$args sent control characters: $(od -c <<<"$out$err" | head -5)"
    done
    run jobs cq
    expect_out "^$id"' +dead +k\\x1B\]0;owned\\x07 .* boom\\x1B\[31m red +line 2 \\u009B1m$' "escaped in the table, on one line"
    run show "$id"
    expect_out '^  kind +k\\x1B\]0;owned\\x07$' "kind escaped"
    expect_out '^  worker +w\\x1B\[H$' "worker escaped"
    expect_out '^  last error +boom\\x1B\[31m red\\x0D$' "error escaped, its first line"
    expect_out '^ {15}line 2 \\u009B1m$' "the error's second line, under the first"
    run wait "$id" --timeout 1
    expect_rc 6 "wait for a dead job"
    # A server message quoting a dedup key: the retry is refused while another job holds it.
    "$hopper" push cq '{}' --dedup-key $'key\e[2J' >/dev/null
    run retry "$id"
    expect_rc 5 "retry while the key is held"
    bad && fail "the refusal sent control characters: $(od -c <<<"$err" | head -5)"
    expect_err 'key\\x1B\[2J' "the key escaped in the message"
    ;;
not_utf8)
    # In a UTF-8 session the server refuses text that is not UTF-8 without naming it ("invalid
    # byte sequence for encoding"): the tool names the argument, its stray bytes shown as \xNN.
    q=$(printf 'q\xff')
    for args in "push $q {}" "stats $q" "jobs $q" "watch $q --once"; do
        # shellcheck disable=SC2086
        run $args
        expect_rc 1 "${args%% *} with a queue name that is not UTF-8"
        expect_err '^hopper [a-z]+: argument "q\\xFF" is not valid UTF-8' "${args%% *}: the argument named"
        grep -q "invalid byte sequence" <<<"$err" && fail "${args%% *}: the server's wording"
    done
    run push uq '{}' --kind "$(printf 'caf\xe9')"
    expect_rc 1 "--kind not UTF-8"
    expect_err '^hopper push: --kind "caf\\xE9" is not valid UTF-8' "--kind named"
    run push uq "$(printf '{"a": "\xff"}')"
    expect_rc 1 "a payload not UTF-8"
    expect_err '^hopper push: argument "\{"a": "\\xFF"\}" is not valid UTF-8' "the payload named"
    [ "$(sql "SELECT count(*) FROM hopper.jobs WHERE queue = 'uq'")" = 0 ] || fail "a refused push pushed"
    # In a Latin-1 session the same bytes are Latin-1 text, converted by the server.
    PGCLIENTENCODING=LATIN1 run push uq '{}' --kind "$(printf 'caf\xe9')"
    expect_rc 0 "a Latin-1 kind in a Latin-1 session"
    [ "$(sql "SELECT kind FROM hopper.job_status($out)")" = "café" ] || fail "the Latin-1 kind stored as café"
    latin=$out
    # JSON is UTF-8 whatever the session's encoding; the table keeps the session's.
    PGCLIENTENCODING=LATIN1 run show "$latin" --json
    expect_rc 0 "show --json in a Latin-1 session"
    iconv -f UTF-8 -t UTF-8 <<<"$out" >/dev/null 2>&1 || fail "show --json printed text that is not UTF-8"
    [ "$(sql "SELECT ('$out'::jsonb)->>'kind'")" = "café" ] || fail "show --json: the kind café"
    PGCLIENTENCODING=LATIN1 run jobs uq --json
    iconv -f UTF-8 -t UTF-8 <<<"$out" >/dev/null 2>&1 || fail "jobs --json printed text that is not UTF-8"
    PGCLIENTENCODING=LATIN1 run show "$latin"
    LC_ALL=C grep -q "caf$(printf '\xe9')\$" <<<"$out" || fail "show: the kind in Latin-1"
    # So the arguments of a --json call are UTF-8 too.
    PGCLIENTENCODING=LATIN1 run --json push uq '{}' --kind "$(printf 'caf\xe9')"
    expect_rc 1 "a Latin-1 kind with --json"
    expect_err '^hopper push: --kind "caf\\xE9" is not valid UTF-8.*which --json sets' "--kind named"
    PGCLIENTENCODING=LATIN1 run --json push uq '{}' --kind café
    expect_rc 0 "a UTF-8 kind with --json in a Latin-1 session"
    [ "$(sql "SELECT kind FROM hopper.job_status($(sql "SELECT ('$out'::jsonb)->>'id'"))")" = "café" ] ||
        fail "--json push: the kind stored as café"
    ;;
latin1_database)
    # A database of another encoding: with PGCLIENTENCODING unset the session took the database's,
    # and the arguments of a UTF-8 terminal were stored unconverted (café as cafÃ©). The tool asks
    # for UTF8 when the locale is UTF-8, as psql does at a terminal.
    l1="${db}_l1"
    psql_admin -c "CREATE DATABASE \"$l1\" ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0" ||
        fail "a LATIN1 database"
    trap 'psql_admin -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" -c "DROP DATABASE IF EXISTS \"$l1\" WITH (FORCE)" >/dev/null 2>&1' EXIT
    PGDATABASE=$l1 psql -X -q -v ON_ERROR_STOP=1 -c "CREATE EXTENSION hopper" || fail "the extension in LATIN1"
    l1sql() { PGDATABASE=$l1 PGCLIENTENCODING=UTF8 psql -X -A -t -q -v ON_ERROR_STOP=1 -c "$1"; }
    unset PGCLIENTENCODING
    PGDATABASE=$l1 LC_ALL=C.UTF-8 run push lq '{"a": "café"}' --kind kïnd
    expect_rc 0 "a UTF-8 terminal's push into a LATIN1 database"
    [ "$(l1sql "SELECT payload->>'a' || ' ' || kind FROM hopper.job_status($out)")" = "café kïnd" ] ||
        fail "the text stored converted: $(l1sql "SELECT payload->>'a' || ' ' || kind FROM hopper.job_status($out)")"
    id=$out
    PGDATABASE=$l1 LC_ALL=C.UTF-8 run show "$id"
    expect_out "kind +kïnd" "shown in UTF-8"
    # A locale of another encoding, or PGCLIENTENCODING, keeps the session's choice.
    PGDATABASE=$l1 LC_ALL=C LANG=C.UTF-8 run push lq '{}' --kind "$(printf 'caf\xe9')"
    expect_rc 0 "a C locale's push into a LATIN1 database"
    [ "$(l1sql "SELECT kind FROM hopper.job_status($out)")" = "café" ] || fail "LC_ALL=C: the bytes as the database's"
    PGDATABASE=$l1 LC_ALL=C.UTF-8 PGCLIENTENCODING=LATIN1 run push lq '{}' --kind "$(printf 'caf\xe9')"
    expect_rc 0 "PGCLIENTENCODING=LATIN1 under a UTF-8 locale"
    [ "$(l1sql "SELECT kind FROM hopper.job_status($out)")" = "café" ] || fail "PGCLIENTENCODING kept"
    ;;
reaper)
    run reaper status
    if psql -X -A -t -q -c "SELECT to_regprocedure('hopper.reaper_status()') IS NOT NULL" | grep -q t; then
        expect_rc 0 "reaper status"
        expect_out "^PID +DATABASE +MODE" "header"
        # The install script started this database's reaper; give it a moment to report.
        for _ in $(seq 50); do
            run reaper status --json
            grep -q "\"database\": \"$db\", \"mode\": \"dynamic\"" <<<"$out" && break
            sleep 0.2
        done
        expect_out "\"database\": \"$db\", \"mode\": \"dynamic\"" "this database's reaper listed"
    else
        expect_rc 7 "no reaper_status() in this database"
        expect_err "no hopper.reaper_status\(\)" "message"
    fi
    run reaper
    expect_rc 1 "missing subcommand"
    run reaper restart
    expect_rc 1 "unknown subcommand"
    ;;
schedules)
    run schedules
    expect_rc 0 "schedules, none"
    expect_out "^NAME +CRON +QUEUE +KIND +NEXT RUN +LAST RUN" "header"
    sql "SELECT hopper.queue_schedule('nightly', '30 2 * * *', 'reports', '{\"t\": 1}', kind => 'report')" >/dev/null
    sql "SELECT hopper.queue_schedule('yearly', '@yearly', 'reports')" >/dev/null
    run schedules
    expect_rc 0 "schedules"
    next=$(sql "SELECT to_char(next_run_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') FROM hopper.queue_schedules() WHERE name = 'nightly'")
    expect_out "^nightly +30 2 \* \* \* +reports +report +$next UTC +never" "nightly row"
    expect_out "^yearly +@yearly +reports +- " "yearly row, no kind"
    [ "$(sed -n 2p <<<"$out" | awk '{print $1}')" = nightly ] || fail "soonest first"
    sql "SELECT hopper.schedule_run_due(next_run_at) FROM hopper.queue_schedules() WHERE name = 'nightly'" >/dev/null
    run schedules --json
    expect_rc 0 "schedules --json"
    [ "$(sql "SELECT count(*) FROM jsonb_array_elements('$out'::jsonb)")" = 2 ] || fail "two schedules in JSON"
    [ "$(sql "SELECT e->>'last_run_at' IS NOT NULL AND (e->'last_job_id')::bigint > 0 AND e->'payload'->>'t' = '1' FROM jsonb_array_elements('$out'::jsonb) e WHERE e->>'name' = 'nightly'")" = t ] || fail "nightly ran, in JSON"
    # Times past the client's clock (2262) and infinity: shown as the server has them.
    sql "UPDATE hopper.schedules SET next_run_at = '9999-01-01 00:00:00+00' WHERE name = 'nightly'"
    sql "UPDATE hopper.schedules SET next_run_at = 'infinity' WHERE name = 'yearly'"
    run schedules
    expect_rc 0 "schedules far ahead"
    expect_out "^nightly .* 9999-01-01 00:00:00 UTC " "a next run in 9999"
    expect_out "^yearly .* infinity +never" "a next run at infinity"
    run schedules --json
    expect_rc 0 "schedules far ahead, --json"
    [ "$(sql "SELECT string_agg(e->>'next_run_at', ',' ORDER BY e->>'name') FROM jsonb_array_elements('$out'::jsonb) e")" = \
        "9999-01-01T00:00:00.000000Z,infinity" ] || fail "far times in JSON"
    run schedules extra
    expect_rc 1 "no arguments"
    ;;
planted_operators)
    # Operators planted in public for types pg_catalog has no exact operator for (numeric *
    # integer, bigint * interval, ...) would run as the tool's user if its SQL reached them.
    psql -X -q -v ON_ERROR_STOP=1 -f "$(dirname "$0")/../../sql/include/plant_operators.sql" || exit 1
    calls() { sql "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.planted_calls"; }
    run push planted '{"n": 1}' --run-at +10m --dedup-key k --dedup-window 10m
    expect_rc 0 "push --run-at"
    id=$out
    run push planted '{"n": 2}' --run-at 2030-01-02T03:04:05Z
    expect_rc 0 "push --run-at a time"
    for cmd in "show $id" "show $id --json" "jobs planted" "jobs planted --state scheduled" \
        "stats" "stats planted --json" "cancel $id" "retry $id" "cancel $id" "schedules" \
        "reaper status" "watch planted --once"; do
        # shellcheck disable=SC2086
        run $cmd
        expect_rc 0 "hopper $cmd"
    done
    run wait "$id" --timeout 5
    expect_rc 6 "wait for a cancelled job"
    [ "$(calls)" = 0 ] || fail "$(calls) planted operators called"
    ;;
*)
    echo "unknown case $case_name"
    exit 2
    ;;
esac

[ "$fails" -eq 0 ] && echo "ok [$case_name]"
exit $((fails > 0))
