#!/usr/bin/env bash
# A queue that keeps no history (retention 0) forgets a job the moment it ends, a cancel included:
# the server then answers "does not exist" for it. A video whose job ended that way is still
# settled: cancelled mid-encode it reads "cancelled" as on any queue; where nothing can tell how
# the job ended (cancelled before a worker took it, or on its last attempt, or its worker killed
# then), it is failed with a reason that says so. Never left pending or processing for good,
# which would also refuse a second submit.
source "$(dirname "$0")/lib/transcode.sh"

make_clip "$WORK/clip.mp4" 8
sql "SELECT hopper.queue_create('transcode', retention => '0')" >/dev/null
job_gone() { ! sql "SELECT hopper.job_status($1)" >/dev/null 2>&1; }
unkept="ended with no worker finishing it, and its queue keeps no history to say how: cancelled, or dead after its last attempt"

# --- cancelled mid-encode -------------------------------------------------------------------
job=$("$BIN" submit "$WORK/clip.mp4" --id cancelled)
start_worker cancel --preset veryslow --threads 1 --hls-time 2
worker=$WORKER_PID
wait_until 30 "the encode to start" encoding "$job"
sql "SELECT hopper.queue_cancel($job)" >/dev/null
wait_until 5 "ffmpeg to stop after queue_cancel" no_ffmpeg
job_gone "$job" || fail "the queue kept job $job: $(job_field "$job" state)"
wait_until 5 "the row to record the cancellation" video_is cancelled failed
[ "$(video_field cancelled error)" = cancelled ] || fail "row error: $(video_field cancelled error)"
grep -q "job $job video cancelled: stopped (cancelled)" "$WORK/cancel.log" || fail "the worker did not report the cancel"
[ ! -e "$OUT/cancelled" ] || fail "a cancelled encode was published"
check_no_staging
kill -0 "$worker" || fail "the worker died with the cancelled job"
kill -TERM "$worker"
wait "$worker" || fail "worker exited with $? on SIGTERM"

# --- cancelled before any worker took it: settled by status ------------------------------------
job=$("$BIN" submit "$WORK/clip.mp4" --id cancelled) || fail "a cancelled video could not be submitted again"
sql "SELECT hopper.queue_cancel($job)" >/dev/null
job_gone "$job" || fail "the queue kept job $job"
[ "$(video_field cancelled processing_status)" = pending ] || fail "row is $(video_field cancelled processing_status)"
"$BIN" status cancelled >"$WORK/status.out" || fail "status exited with $?"
[ "$(video_field cancelled processing_status)" = failed ] || fail "status left the row $(video_field cancelled processing_status)"
[ "$(video_field cancelled error)" = "job $job $unkept" ] || fail "row error: $(video_field cancelled error)"
grep -q "^status: *failed" "$WORK/status.out" || fail "status shows: $(cat "$WORK/status.out")"

# --- cancelled on its last attempt: a lease run out would have ended it too ------------------
job=$("$BIN" submit "$WORK/clip.mp4" --id last --max-attempts 1)
start_worker last --preset veryslow --threads 1 --hls-time 2
worker=$WORKER_PID
wait_until 30 "the encode to start" encoding "$job"
sql "SELECT hopper.queue_cancel($job)" >/dev/null
wait_until 5 "ffmpeg to stop after queue_cancel" no_ffmpeg
wait_until 5 "the row to be settled" video_is last failed
[ "$(video_field last error)" = "job $job $unkept" ] || fail "row error: $(video_field last error)"
[ ! -e "$OUT/last" ] || fail "a cancelled encode was published"
kill -TERM "$worker"
wait "$worker" || fail "worker exited with $? on SIGTERM"

# --- worker killed on the last attempt: the processing row is settled once the job is gone ----
job=$("$BIN" submit "$WORK/clip.mp4" --id crashed --max-attempts 1)
start_worker crash --preset veryslow --threads 1 --hls-time 2 --lease 2s
worker=$WORKER_PID
wait_until 30 "the encode to start" encoding "$job"
kill -9 "$worker"
wait "$worker" 2>/dev/null || true
wait_until 5 "ffmpeg to die with its worker" no_ffmpeg
# The reaper sees the connection gone (or the lease run out) and the job dies: nothing is kept.
wait_until 60 "the killed worker's job to end" job_gone "$job"
[ "$(video_field crashed processing_status)" = processing ] || fail "row is $(video_field crashed processing_status)"
"$BIN" status crashed >/dev/null || fail "status exited with $?"
[ "$(video_field crashed processing_status)" = failed ] || fail "status left the row $(video_field crashed processing_status)"
[ "$(video_field crashed error)" = "job $job $unkept" ] || fail "row error: $(video_field crashed error)"
"$BIN" submit "$WORK/clip.mp4" --id crashed >/dev/null || fail "the settled video could not be submitted again"
log "ok"
