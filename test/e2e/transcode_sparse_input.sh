#!/usr/bin/env bash
# A sparse input, a few frames far apart (here 3 frames at 0, 20 and 40 s, which the container
# says last 40.04 s), is encoded at a constant frame rate, each frame held until the next. The
# stream lasts what the input declares, in segments of --hls-time: the last frame is not held as
# long again as the gap before it (a tiny upload would make hours of stream).
source "$(dirname "$0")/lib/transcode.sh"

ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i "testsrc=size=160x90:rate=25" -frames:v 3 \
    -vf "setpts=N*20/TB" -c:v ffv1 "$WORK/sparse.mkv"
declared=$(ffprobe -v error -show_entries format=duration -of csv=p=0 "$WORK/sparse.mkv")
awk -v d="$declared" 'BEGIN { exit !(d > 40 && d < 40.1) }' || fail "the input lasts $declared s, not 40.04"

job=$("$BIN" submit "$WORK/sparse.mkv" --id sparse)
timeout 90 "$BIN" run --output-dir "$OUT" --hls-time 2 --preset ultrafast --threads 2 \
    --max-jobs 1 >"$WORK/worker.log" 2>&1 || fail "worker exited with $?"
[ "$(job_field "$job" "state || '/' || attempt")" = completed/1 ] ||
    fail "job $(job_field "$job" "state || '/' || attempt"): $(video_field sparse error)"
check_media_playlist "$OUT/sparse/index.m3u8" 2
# Within one segment of the declared length.
streamed=$(ffprobe -v error -show_entries format=duration -of csv=p=0 "$OUT/sparse/index.m3u8")
awk -v s="$streamed" -v d="$declared" 'BEGIN { exit !(s > d - 2 && s < d + 2) }' ||
    fail "the stream lasts $streamed s, the input $declared s"
[ "$(grep -c '^#EXTINF' "$OUT/sparse/index.m3u8")" -le 21 ] ||
    fail "$(grep -c '^#EXTINF' "$OUT/sparse/index.m3u8") segments of 2 s for 40 s"
check_no_staging
log "ok"
