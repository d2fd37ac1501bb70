#!/usr/bin/env bash
# A job cancelled after ffmpeg has written the whole stream but before the worker publishes it:
# nothing is published (an older stream of the video stays) and the row says cancelled, as the
# job does.
source "$(dirname "$0")/lib/transcode.sh"

make_clip "$WORK/clip.mp4" 2 320x180
# ffmpeg that does its work, then has the job cancelled before it exits: the worker learns of
# the cancel only when it goes to publish (its heartbeat, with a long lease, is far off).
cat >"$WORK/ffmpeg-then-cancel" <<SH
#!/bin/sh
ffmpeg "\$@" || exit
psql -X -q -c "SELECT hopper.queue_cancel(id) FROM hopper.jobs WHERE state = 'running'" >/dev/null
SH
chmod +x "$WORK/ffmpeg-then-cancel"

mkdir -p "$OUT/late"
echo "old stream" >"$OUT/late/index.m3u8"
job=$("$BIN" submit "$WORK/clip.mp4" --id late)
timeout 60 "$BIN" run --output-dir "$OUT" --hls-time 1 --preset ultrafast --lease 60s \
    --ffmpeg "$WORK/ffmpeg-then-cancel" --max-jobs 1 >"$WORK/worker.log" 2>&1 ||
    fail "worker exited with $?"
[ "$(job_field "$job" state)" = cancelled ] || fail "job is $(job_field "$job" state)"
[ "$(video_field late processing_status)" = failed ] || fail "row is $(video_field late processing_status)"
[ "$(video_field late error)" = cancelled ] || fail "row error: $(video_field late error)"
[ "$(cat "$OUT/late/index.m3u8")" = "old stream" ] || fail "a cancelled job's stream was published"
check_no_staging
log "ok"
