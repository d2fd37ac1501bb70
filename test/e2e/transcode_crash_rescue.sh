#!/usr/bin/env bash
# A worker killed with SIGKILL mid-encode: its ffmpeg dies with it, nothing is published, and once
# the reaper sees its connection gone (the runtime pulls session-bound) a second worker takes the
# job over and completes it. The lease is long enough that the reaper's rescue of gone sessions
# comes first, within its next pass: a lease that expired first would be rescued with the queue's
# backoff, the job scheduled, and the one-shot second worker could find the queue idle and exit.
source "$(dirname "$0")/lib/transcode.sh"

make_clip "$WORK/clip.mp4" 6
job=$("$BIN" submit "$WORK/clip.mp4" --id crash)

# The slowest preset on one thread keeps the first worker busy long enough to be killed.
start_worker first --preset veryslow --threads 1 --hls-time 2 --lease 20s
first=$WORKER_PID
wait_until 30 "the first worker to start encoding" encoding "$job"
ffmpeg_running_for || fail "no ffmpeg running while the job reports progress"
[ "$(video_field crash processing_status)" = processing ] || fail "row not processing during the encode"
kill -9 "$first"
wait "$first" 2>/dev/null || true

wait_until 5 "ffmpeg to die with its worker" no_ffmpeg
[ ! -e "$OUT/crash" ] || fail "a killed worker left published output"
# Still leased to the dead worker until the reaper's next pass (or already rescued by it).
state=$(job_field "$job" state)
case "$state" in running | available) ;; *) fail "job is $state before the second worker: $(job_field "$job" "attempt || ' ' || coalesce(last_error, '-')")" ;; esac

start_worker second --preset ultrafast --hls-time 2 --exit-when-idle
second=$WORKER_PID
for _ in $(seq 1 600); do kill -0 "$second" 2>/dev/null || break; sleep 0.1; done
kill -0 "$second" 2>/dev/null && fail "second worker did not finish within 60 s"
wait "$second" || fail "second worker exited with $?"

[ "$(job_field "$job" state)" = completed ] || fail "job is $(job_field "$job" state) after the rescue"
[ "$(job_field "$job" attempt)" = 2 ] || fail "job attempt $(job_field "$job" attempt), expected 2"
[ "$(video_field crash processing_status)" = processed ] || fail "row not processed after the rescue"
grep -q "job $job video crash: processed" "$WORK/second.log" || fail "the second worker did not process it"
# The first attempt's error stays in the job's record, but status no longer shows it as news.
"$BIN" status crash >"$WORK/status.out"
if grep -q "^job error:" "$WORK/status.out"; then fail "status shows an old attempt's error: $(cat "$WORK/status.out")"; fi
check_media_playlist "$OUT/crash/index.m3u8" 2
check_duration "$OUT/crash/index.m3u8" 6
# The dead worker's staging directory was swept by the one that finished the job.
check_no_staging
log "ok"
