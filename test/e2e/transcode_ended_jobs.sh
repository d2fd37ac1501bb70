#!/usr/bin/env bash
# Jobs that end with no handler to report it: cancelled before any worker took them, or dead
# because their worker was killed on the last attempt. Their rows must not stay pending or
# processing for ever: status, a second submit and every worker settle them as failed, with the
# job's reason, and a dead job retried with `hopper retry` is transcoded. A worker pointed at a
# database without the extension refuses to start, and one told to exit when idle does so on a
# queue that does not exist yet.
source "$(dirname "$0")/lib/transcode.sh"

make_clip "$WORK/clip.mp4" 6

# --- nothing submitted yet: the queue does not exist, and the worker is idle ---------------
start_worker empty --exit-when-idle
empty=$WORKER_PID
for _ in $(seq 1 100); do kill -0 "$empty" 2>/dev/null || break; sleep 0.1; done
kill -0 "$empty" 2>/dev/null && fail "a worker told to exit when idle kept waiting for a queue that does not exist"
wait "$empty" || fail "the idle worker exited with $?"

# --- a database without the extension ------------------------------------------------------
bare="${PGDATABASE}_bare"
psql -X -q -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $bare" -c "CREATE DATABASE $bare" >/dev/null
if PGDATABASE=$bare timeout 20 "$BIN" run --output-dir "$OUT" --exit-when-idle >"$WORK/bare.log" 2>&1; then
    fail "a worker started in a database without the extension"
fi
grep -q "no hopper extension" "$WORK/bare.log" || fail "no clear refusal: $(cat "$WORK/bare.log")"
[ "$(PGDATABASE=$bare sql "SELECT count(*) FROM pg_namespace WHERE nspname = 'transcode'")" = 0 ] ||
    fail "the refused worker created its schema anyway"
psql -X -q -d postgres -c "DROP DATABASE $bare" >/dev/null

# --- cancelled before any worker took it ---------------------------------------------------
job=$("$BIN" submit "$WORK/clip.mp4" --id early)
sql "SELECT hopper.queue_cancel($job)" >/dev/null
"$BIN" status early >"$WORK/status.out" || fail "status exited with $?"
grep -q '^status: *failed' "$WORK/status.out" || fail "status after the cancel: $(cat "$WORK/status.out")"
[ "$(video_field early error)" = cancelled ] || fail "row error: $(video_field early error)"
second=$("$BIN" submit "$WORK/clip.mp4" --id early) || fail "a cancelled video could not be submitted again"
# A second submit settles the row itself, with no status in between.
sql "SELECT hopper.queue_cancel($second)" >/dev/null
third=$("$BIN" submit "$WORK/clip.mp4" --id early) || fail "a submit after a cancel was refused"
[ "$(video_field early job_id)" = "$third" ] || fail "the row does not name the last job"

# --- dead: its worker killed on the only attempt -------------------------------------------
job=$("$BIN" submit "$WORK/clip.mp4" --id killed --max-attempts 1)
start_worker first --preset veryslow --threads 1 --hls-time 2 --lease 3s
first=$WORKER_PID
wait_until 30 "the encode of the last attempt to start" encoding "$job"
kill -9 "$first"
wait "$first" 2>/dev/null || true
wait_until 20 "the reaper to bury the job" job_is "$job" dead
[ "$(video_field killed processing_status)" = processing ] || fail "row is $(video_field killed processing_status) before any settling"
ls -A "$OUT" | grep -q '^\.killed\.partial-' || fail "the killed encode left no staging directory to sweep"

# The next worker settles it when it starts (and transcodes the video still waiting).
start_worker second --preset ultrafast --hls-time 2 --exit-when-idle
second_worker=$WORKER_PID
for _ in $(seq 1 600); do kill -0 "$second_worker" 2>/dev/null || break; sleep 0.1; done
kill -0 "$second_worker" 2>/dev/null && fail "second worker did not finish within 60 s"
wait "$second_worker" || fail "second worker exited with $?"
[ "$(video_field killed processing_status)" = failed ] || fail "row is $(video_field killed processing_status) after a worker settled it"
case "$(video_field killed error)" in *"worker backend gone"* | *"lease expired"*) ;;
    *) fail "row error: $(video_field killed error)" ;; esac
grep -q "video killed: its job ended without a worker finishing it" "$WORK/second.log" ||
    fail "the second worker did not report settling the row"
[ "$(video_field early processing_status)" = processed ] || fail "the waiting video was not processed"
check_no_staging

# --- retried: the failed row of the same job is transcoded ---------------------------------
sql "SELECT hopper.queue_retry($job)" >/dev/null
start_worker third --preset ultrafast --hls-time 2 --exit-when-idle
third_worker=$WORKER_PID
for _ in $(seq 1 600); do kill -0 "$third_worker" 2>/dev/null || break; sleep 0.1; done
kill -0 "$third_worker" 2>/dev/null && fail "third worker did not finish within 60 s"
wait "$third_worker" || fail "third worker exited with $?"
[ "$(job_field "$job" state)" = completed ] || fail "retried job is $(job_field "$job" state): $(job_field "$job" last_error)"
[ "$(video_field killed processing_status)" = processed ] || fail "retried video is $(video_field killed processing_status)"
check_media_playlist "$OUT/killed/index.m3u8" 2
check_no_staging
log "ok"
