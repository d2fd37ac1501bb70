#!/usr/bin/env bash
# The C++ workers, the client and hopper-transcode behind PgBouncer in transaction mode, where
# each transaction may run on another server session and the pid libpq reports is PgBouncer's
# own: a worker must not bind its leases to a server session the pooler may close; the client's
# statements must not collide with those another client prepared on the same server session;
# a TakeWorker's shutdown must end its open transaction on the server, not a pid that names no
# backend. Pool sizes of 1 and 2 make the sharing certain.
source "$(dirname "$0")/lib/transcode.sh"

PW="$REPO/client/build/tests/hopper_pooler_worker"
[ -x "$PW" ] || fail "missing $PW: build first (make)"
PGBOUNCER=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
[ -x "$PGBOUNCER" ] || fail "pgbouncer is not installed (test/deps.sh installs it)"

# PgBouncer refuses to run as root: as root it runs as postgres, as the cluster does. It listens
# on a Unix socket in a directory of its own, so no TCP port can be taken already.
PGB=$(mktemp -d /tmp/hopper-e2e-pgbouncer.XXXXXX)
stop_pgbouncer() {
    local pid
    pid=$(cat "$PGB/pgbouncer.pid" 2>/dev/null) || pid=
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -rf "$PGB"
}
trap 'stop_pgbouncer; cleanup' EXIT
as_server_user() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" -ne 0 ] || chown postgres "$PGB"
PGB_PORT=6432
cat >"$PGB/pgbouncer.ini" <<INI
[databases]
tx1 = host=$PGHOST port=$PGPORT dbname=$PGDATABASE pool_mode=transaction pool_size=1
tx2 = host=$PGHOST port=$PGPORT dbname=$PGDATABASE pool_mode=transaction pool_size=2
[pgbouncer]
listen_addr =
listen_port = $PGB_PORT
unix_socket_dir = $PGB
auth_type = trust
auth_file = $PGB/users.txt
admin_users = $PGUSER
logfile = $PGB/pgbouncer.log
pidfile = $PGB/pgbouncer.pid
max_client_conn = 100
INI
echo "\"$PGUSER\" \"\"" >"$PGB/users.txt"
[ "$(id -u)" -ne 0 ] || chown postgres "$PGB"/*

as_server_user "$PGBOUNCER" -d -q "$PGB/pgbouncer.ini" || fail "pgbouncer did not start"
TX1="host=$PGB port=$PGB_PORT dbname=tx1 user=$PGUSER"
TX2="host=$PGB port=$PGB_PORT dbname=tx2 user=$PGUSER"
ADMIN="host=$PGB port=$PGB_PORT dbname=pgbouncer user=$PGUSER"
wait_until 10 "pgbouncer to accept connections" psql -X -q "$TX1" -c "SELECT 1"

sql "CREATE TABLE done (id bigint, attempt int)"
push() { sql "SELECT hopper.queue_push('$1', '{}')"; }
# pooler_worker LOGNAME ARGS...: hopper_pooler_worker in the background; its pid in WORKER_PID.
pooler_worker() {
    local name=$1
    shift
    "$PW" "$@" >"$WORK/$name.log" 2>&1 &
    WORKER_PID=$!
    WORKER_PIDS+=("$WORKER_PID")
}
# exits_within SECONDS PID: waits for PID to exit; its exit status in EXIT_STATUS.
exits_within() {
    local i
    for ((i = 0; i < $1 * 10; i++)); do
        if ! kill -0 "$2" 2>/dev/null; then
            EXIT_STATUS=0
            wait "$2" || EXIT_STATUS=$?
            return 0
        fi
        sleep 0.1
    done
    return 1
}
gone() { [ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE pid = $1")" = 0 ]; }

# 1. A Worker does not bind its leases to the pooled session: when PgBouncer closes the server
# session that pulled the job (RECONNECT here; server_lifetime and server_idle_timeout alike),
# the reaper does not take the job from the worker that still runs it.
job=$(push hold)
pooler_worker hold hold "$TX2" hold 6000
hold=$WORKER_PID
wait_until 15 "the worker to start its job" job_is "$job" running
[ "$(sql "SELECT session_bound FROM hopper.jobs WHERE id = $job")" = f ] ||
    fail "the worker bound its lease to a pooled server session"
puller=$(sql "SELECT claimed_pid FROM hopper.jobs WHERE id = $job")
psql -X -q "$ADMIN" -c "RECONNECT tx2" >/dev/null || fail "RECONNECT failed"
wait_until 10 "PgBouncer to close the server session that pulled the job" gone "$puller"
# Two passes of the reaper that ended after the session was gone: the first may have begun before.
gone_at=$(sql "SELECT pg_catalog.clock_timestamp()")
passes_since() {
    [ "$(sql "SELECT count(*) FROM hopper.reaper_status() WHERE database = current_database() AND last_run > '$1'")" = 1 ]
}
wait_until 10 "a reaper pass after the session closed" passes_since "$gone_at"
first_pass=$(sql "SELECT last_run FROM hopper.reaper_status() WHERE database = current_database()")
wait_until 10 "a second reaper pass" passes_since "$first_pass"
[ "$(sql "SELECT state || ' ' || attempt || ' ' || (last_error IS NULL) FROM hopper.jobs WHERE id = $job")" = "running 1 true" ] ||
    fail "the running job was rescued: $(sql "SELECT state, attempt, last_error FROM hopper.jobs WHERE id = $job")"
exits_within 20 "$hold" || fail "the hold worker did not finish its job"
[ "$EXIT_STATUS" = 0 ] || fail "the hold worker exited with $EXIT_STATUS"
[ "$(job_field "$job" "state || ' ' || attempt")" = "completed 1" ] ||
    fail "job $job: $(job_field "$job" "state || ' attempt ' || attempt")"
grep -q "completed 1 failed 0 lost 0" "$WORK/hold.log" || fail "hold worker: $(cat "$WORK/hold.log")"
grep -q "pooler" "$WORK/hold.log" || fail "the worker did not say it found a pooler"
log "ok: Worker leases are not bound to the pooled session"

# 2. A TakeWorker of two threads shares one server session: every take runs in a transaction on
# it, so a statement one thread prepared there must not stop the other (42P05).
sql "SELECT hopper.queue_push_batch('take', array_fill('{}'::jsonb, ARRAY[20]))" >/dev/null
pooler_worker take take "$TX1" take 2
take=$WORKER_PID
all_taken() { [ "$(sql "SELECT count(*) FROM done")" = 20 ] || ! kill -0 "$take" 2>/dev/null; }
wait_until 30 "the TakeWorker to take the 20 jobs" all_taken
kill -TERM "$take" 2>/dev/null || true
exits_within 15 "$take" || fail "the TakeWorker did not stop"
[ "$EXIT_STATUS" = 0 ] || fail "the TakeWorker exited with $EXIT_STATUS"
[ "$(sql "SELECT count(*) FROM done")" = 20 ] || fail "$(sql "SELECT count(*) FROM done") of 20 jobs done"
if grep -Eq "refused|already exists|42P05" "$WORK/take.log"; then fail "take: $(cat "$WORK/take.log")"; fi
log "ok: TakeWorker drains a queue through one shared server session"

# A pooler the client does not recognize (HOPPER_POOLER=off stands for one that passes the
# server's pid through) has the statements of one thread collide with the other's: 42P05 is an
# error of the moment, retried, not a refusal for good that stops the worker.
sql "TRUNCATE done"
sql "SELECT hopper.queue_push_batch('take2', array_fill('{}'::jsonb, ARRAY[20]))" >/dev/null
HOPPER_POOLER=off pooler_worker take2 take "$TX1" take2 2
take=$WORKER_PID
wait_until 30 "the TakeWorker to take the 20 jobs" all_taken
kill -TERM "$take" 2>/dev/null || true
exits_within 15 "$take" || fail "the TakeWorker did not stop"
[ "$EXIT_STATUS" = 0 ] || fail "the TakeWorker exited with $EXIT_STATUS"
[ "$(sql "SELECT count(*) FROM done")" = 20 ] || fail "$(sql "SELECT count(*) FROM done") of 20 jobs done"
grep -q "already exists" "$WORK/take2.log" || fail "the threads' statements never collided"
log "ok: a TakeWorker behind an unrecognized pooler retries 42P05"

# 3. complete_with on two threads through one server session: each completes its job at its first
# attempt, whoever prepared a statement there first.
sql "TRUNCATE done"
for _ in 1 2 3 4; do push cw >/dev/null; done
pooler_worker cw complete_with "$TX1" cw 4
exits_within 30 "$WORKER_PID" || fail "the complete_with worker did not finish 4 jobs"
[ "$EXIT_STATUS" = 0 ] || fail "the complete_with worker exited with $EXIT_STATUS"
[ "$(sql "SELECT count(*) FROM done WHERE attempt = 1")" = 4 ] ||
    fail "complete_with: $(sql "SELECT string_agg(id || ':' || attempt, ' ') FROM done")"
[ "$(sql "SELECT count(*) FROM hopper.queue_jobs('cw', 'completed') WHERE attempt = 1")" = 4 ] ||
    fail "not every complete_with job completed at attempt 1"
grep -q "completed 4 failed 0" "$WORK/cw.log" || fail "cw: $(cat "$WORK/cw.log")"
log "ok: complete_with completes at the first attempt"

# 3b. The heartbeat's 200 ms lock wait stays inside its own transactions: set for the session, it
# would stay on the pool's one server session for whichever client came next.
job=$(push beat)
pooler_worker beat progress "$TX1" beat 500
exits_within 30 "$WORKER_PID" || fail "the beat worker did not finish its job"
[ "$(job_field "$job" "state || ' ' || attempt")" = "completed 1" ] ||
    fail "job $job: $(job_field "$job" "state || ' attempt ' || attempt")"
[ "$(psql -X -qAt "$TX1" -c "SHOW lock_timeout")" = 0 ] ||
    fail "the heartbeat left its lock_timeout on the pooled server session"
log "ok: the heartbeat's lock wait does not outlive its transactions"

# 4. hopper-transcode submit (a row and a push in one transaction), twice on one server session.
touch "$WORK/a.mp4" "$WORK/b.mp4"
"$BIN" submit "$WORK/a.mp4" --id a --dsn "$TX1" >/dev/null 2>"$WORK/submit.log" ||
    fail "first submit: $(cat "$WORK/submit.log")"
"$BIN" submit "$WORK/b.mp4" --id b --dsn "$TX1" >/dev/null 2>"$WORK/submit.log" ||
    fail "second submit: $(cat "$WORK/submit.log")"
[ "$(sql "SELECT count(*) FROM transcode.videos WHERE processing_status = 'pending'")" = 2 ] ||
    fail "the submitted videos are not pending"
log "ok: hopper-transcode submit"

# 5. A TakeWorker's shutdown deadline ends the open transaction on its server session: the job is
# available again at once, not completed when the handler's 15 s sleep ends.
job=$(push sleep)
pooler_worker sleep take_sleep "$TX2" sleep 1000
sleeper=$WORKER_PID
sleeping() { [ "$(sql "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'active' AND query LIKE 'SELECT pg_catalog.pg_sleep(%'")" = 1 ]; }
wait_until 15 "the handler to sleep in the server" sleeping
kill -TERM "$sleeper"
exits_within 10 "$sleeper" || fail "the TakeWorker's shutdown did not end its open transaction"
[ "$EXIT_STATUS" = 0 ] || fail "the TakeWorker exited with $EXIT_STATUS"
[ "$(job_field "$job" state)" = available ] || fail "job $job is $(job_field "$job" state), not available"
grep -q "released 1" "$WORK/sleep.log" || fail "sleep: $(cat "$WORK/sleep.log")"
grep -q "ended 1 open transaction" "$WORK/sleep.log" || fail "sleep: $(cat "$WORK/sleep.log")"
log "ok: TakeWorker shutdown ends the open transaction"

# 6. The same on a pool of one server connection: the connection that is to end the transaction
# waits for the pool until the handler's 3 s sleep is over, and the thread, about to commit, must
# not: committed, its server session would serve that very connection (or another client) when
# the pg_terminate_backend arrives. It drops its connection instead, and the job is available.
job=$(push sleep2)
pooler_worker sleep2 take_sleep "$TX1" sleep2 500 3
sleeper=$WORKER_PID
wait_until 15 "the handler to sleep in the server" sleeping
kill -TERM "$sleeper"
exits_within 15 "$sleeper" || fail "the TakeWorker did not stop"
[ "$EXIT_STATUS" = 0 ] || fail "the TakeWorker exited with $EXIT_STATUS"
[ "$(job_field "$job" state)" = available ] || fail "job $job is $(job_field "$job" state), not available"
grep -q "ended 1 open transaction" "$WORK/sleep2.log" || fail "sleep2: $(cat "$WORK/sleep2.log")"
if grep -q "could not" "$WORK/sleep2.log"; then fail "sleep2: $(cat "$WORK/sleep2.log")"; fi
log "ok: a transaction ending as the deadline ends it is not committed"
