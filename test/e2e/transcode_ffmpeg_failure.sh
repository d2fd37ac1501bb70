#!/usr/bin/env bash
# An encode that fails (here an ffmpeg that reports a full disk) is an ordinary failure: the job is
# retried and the row waits as pending with the reason; after the last attempt both say failed, with
# the tail of ffmpeg's output.
source "$(dirname "$0")/lib/transcode.sh"

make_clip "$WORK/clip.mp4" 2 320x180
# It answers the worker's start-up check (-version) as a working ffmpeg on a full disk would, and
# gets 0.8 s into the clip first: ffmpeg's progress output ends with progress=end however it exits.
cat >"$WORK/ffmpeg-disk-full" <<'SH'
#!/bin/sh
[ "$1" = -version ] && { echo "ffmpeg version 0-disk-full"; exit 0; }
printf 'out_time_us=400000\nspeed=1.0x\nprogress=continue\n'
printf 'out_time_us=800000\nspeed=1.0x\nprogress=end\n'
echo "Error writing trailer: No space left on device" >&2
echo "Conversion failed!" >&2
exit 1
SH
chmod +x "$WORK/ffmpeg-disk-full"

retried=$("$BIN" submit "$WORK/clip.mp4" --id retried --max-attempts 3)
timeout 60 "$BIN" run --output-dir "$OUT" --ffmpeg "$WORK/ffmpeg-disk-full" --max-jobs 1 \
    >"$WORK/worker.log" 2>&1 || fail "worker exited with $?"
case "$(job_field "$retried" state)" in available | scheduled) ;; *) fail "job is $(job_field "$retried" state), expected a retry" ;; esac
[ "$(job_field "$retried" attempt)" = 1 ] || fail "attempt $(job_field "$retried" attempt)"
job_field "$retried" last_error | grep -q "No space left on device" || fail "job error: $(job_field "$retried" last_error)"
[ "$(video_field retried processing_status)" = pending ] || fail "row is $(video_field retried processing_status)"
video_field retried error | grep -q "Conversion failed!" || fail "row error: $(video_field retried error)"
# Waiting for its retry, the job shows where the failed encode stopped, not a finished one.
[ "$(job_field "$retried" "progress || '/' || (progress_detail->>'position')")" = 0.4/0.800 ] ||
    fail "progress after a failed encode: $(job_field "$retried" "progress || ' ' || progress_detail")"
grep -q "100%" "$WORK/worker.log" && fail "a failed encode logged as done: $(grep "%" "$WORK/worker.log")"
sql "SELECT hopper.queue_cancel($retried)" >/dev/null

last=$("$BIN" submit "$WORK/clip.mp4" --id last --max-attempts 1)
timeout 60 "$BIN" run --output-dir "$OUT" --ffmpeg "$WORK/ffmpeg-disk-full" --max-jobs 1 \
    >"$WORK/worker2.log" 2>&1 || fail "worker exited with $?"
[ "$(job_field "$last" "state || '/' || attempt")" = dead/1 ] || fail "job: $(job_field "$last" "state || '/' || attempt")"
[ "$(video_field last processing_status)" = failed ] || fail "row is $(video_field last processing_status)"
video_field last error | grep -q "ffmpeg exited with status 1" || fail "row error: $(video_field last error)"
[ ! -e "$OUT/retried" ] && [ ! -e "$OUT/last" ] || fail "a failed encode was published"
check_no_staging
log "ok"
