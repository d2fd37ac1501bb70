#!/usr/bin/env bash
# Stopping an encode from outside: queue_cancel kills ffmpeg promptly and the video is not
# processed; the per-job --timeout fails the job; SIGTERM past --shutdown-timeout releases it,
# and so does a second SIGINT at once.
source "$(dirname "$0")/lib/transcode.sh"

make_clip "$WORK/clip.mp4" 8

# --- cancellation -------------------------------------------------------------------------
job=$("$BIN" submit "$WORK/clip.mp4" --id cancelled)
start_worker cancel --preset veryslow --threads 1 --hls-time 2
worker=$WORKER_PID
wait_until 30 "the encode to start" encoding "$job"
ffmpeg_running_for || fail "no ffmpeg running while the job reports progress"
sql "SELECT hopper.queue_cancel($job)" >/dev/null
start=$(date +%s.%N)
wait_until 5 "ffmpeg to stop after queue_cancel" no_ffmpeg
log "ffmpeg gone $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }') s after queue_cancel"
[ "$(job_field "$job" state)" = cancelled ] || fail "job is $(job_field "$job" state)"
wait_until 5 "the row to record the cancellation" video_is cancelled failed
[ "$(video_field cancelled error)" = cancelled ] || fail "row error: $(video_field cancelled error)"
[ ! -e "$OUT/cancelled" ] || fail "a cancelled encode was published"
check_no_staging
kill -0 "$worker" || fail "the worker died with the cancelled job"

# --- worker shutdown: SIGTERM, running job released after --shutdown-timeout --------------
kill -TERM "$worker"
wait "$worker" || fail "worker exited with $? on SIGTERM"
job=$("$BIN" submit "$WORK/clip.mp4" --id released)
start_worker shutdown --preset veryslow --threads 1 --hls-time 2 --shutdown-timeout 1s
worker=$WORKER_PID
wait_until 30 "the encode to start" encoding "$job"
kill -TERM "$worker"
wait "$worker" || fail "worker exited with $? after SIGTERM"
no_ffmpeg || fail "ffmpeg outlived the worker's shutdown"
[ "$(job_field "$job" state)" = available ] || fail "job is $(job_field "$job" state), expected released"
[ "$(video_field released processing_status)" = pending ] || fail "row is $(video_field released processing_status)"
[ ! -e "$OUT/released" ] || fail "a released encode was published"
check_no_staging

# --- timeout: the job fails (here with one attempt allowed: dead), ffmpeg's tail recorded ---
job=$("$BIN" submit "$WORK/clip.mp4" --id slow --max-attempts 1)
# The released job is not this part's business: out of the way.
sql "SELECT hopper.queue_cancel($(video_field released job_id))" >/dev/null
timeout 60 "$BIN" run --output-dir "$OUT" --preset veryslow --threads 1 --timeout 2s --max-jobs 1 \
    >"$WORK/timeout.log" 2>&1 || fail "worker exited with $?"
[ "$(job_field "$job" state)" = dead ] || fail "timed-out job is $(job_field "$job" state)"
job_field "$job" last_error | grep -q "timed out after" || fail "job error: $(job_field "$job" last_error)"
[ "$(video_field slow processing_status)" = failed ] || fail "timed-out row is $(video_field slow processing_status)"
video_field slow error | grep -q "timed out after" || fail "row error: $(video_field slow error)"
no_ffmpeg || fail "ffmpeg outlived the timeout"
[ ! -e "$OUT/slow" ] || fail "a timed-out encode was published"

# --- Ctrl-C twice: the second SIGINT releases the running job now, not after 30 s -----------
job=$("$BIN" submit "$WORK/clip.mp4" --id hurried)
start_worker hurried --preset veryslow --threads 1 --hls-time 2 --shutdown-timeout 30s
worker=$WORKER_PID
wait_until 30 "the encode to start" encoding "$job"
kill -INT "$worker"
sleep 0.5
kill -0 "$worker" || fail "one SIGINT did not wait for the running encode"
kill -INT "$worker"
start=$(date +%s.%N)
wait "$worker" || fail "worker exited with $? after a second SIGINT"
took=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
awk -v t="$took" 'BEGIN { exit !(t < 10) }' || fail "the second SIGINT took $took s to end the worker"
log "worker gone $took s after the second SIGINT"
no_ffmpeg || fail "ffmpeg outlived the worker's shutdown"
[ "$(job_field "$job" "state || '/' || attempt")" = available/0 ] ||
    fail "job is $(job_field "$job" "state || '/' || attempt"), expected released"
[ "$(video_field hurried processing_status)" = pending ] || fail "row is $(video_field hurried processing_status)"
[ ! -e "$OUT/hurried" ] || fail "a released encode was published"
check_no_staging
log "ok"
