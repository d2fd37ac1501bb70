#!/usr/bin/env bash
# A video whose picture ends long before its sound (a single still frame muxed over 5 s of audio,
# in MP4 and in Matroska; one second of picture under six of sound, as a ladder) is encoded to a
# stream as long as its sound, its last frame held to the end: completed at attempt 1, not taken
# for a cut-short upload.
source "$(dirname "$0")/lib/transcode.sh"

ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i "testsrc=size=320x240:rate=25" \
    -frames:v 1 -c:v libx264 -preset ultrafast -pix_fmt yuv420p "$WORK/frame.mp4"
ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i "testsrc=size=320x240:rate=25" -t 1 \
    -c:v libx264 -preset ultrafast -pix_fmt yuv420p "$WORK/second.mp4"
ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i "sine=frequency=440:duration=5" \
    -c:a aac "$WORK/tone5.m4a"
ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i "sine=frequency=440:duration=6" \
    -c:a aac "$WORK/tone6.m4a"
for ext in mp4 mkv; do
    ffmpeg -hide_banner -nostdin -loglevel error -i "$WORK/frame.mp4" -i "$WORK/tone5.m4a" \
        -map 0:v -map 1:a -c copy "$WORK/still.$ext"
done
ffmpeg -hide_banner -nostdin -loglevel error -i "$WORK/second.mp4" -i "$WORK/tone6.m4a" \
    -map 0:v -map 1:a -c copy "$WORK/short.mp4"

declare -A jobs
jobs[stillmp4]=$("$BIN" submit "$WORK/still.mp4" --id stillmp4)
jobs[stillmkv]=$("$BIN" submit "$WORK/still.mkv" --id stillmkv)
timeout 90 "$BIN" run --output-dir "$OUT" --hls-time 2 --preset ultrafast --threads 2 \
    --exit-when-idle >"$WORK/worker.log" 2>&1 || fail "worker exited with $?"
jobs[short]=$("$BIN" submit "$WORK/short.mp4" --id short)
timeout 90 "$BIN" run --output-dir "$OUT" --hls-time 2 --preset ultrafast --threads 2 --ladder \
    --ladder-heights 240,120 --exit-when-idle >"$WORK/ladder.log" 2>&1 || fail "worker exited with $?"

for v in stillmp4 stillmkv short; do
    j=${jobs[$v]}
    [ "$(job_field "$j" "state || '/' || attempt")" = completed/1 ] ||
        fail "$v: job $(job_field "$j" "state || '/' || attempt"): $(video_field "$v" error)"
    video_is "$v" processed || fail "$v: row is $(video_field "$v" processing_status)"
done
for v in stillmp4 stillmkv; do
    check_media_playlist "$OUT/$v/index.m3u8" 2
    check_duration "$OUT/$v/index.m3u8" 5
    # The picture runs to the end: the last segment has video in it too.
    last=$(grep -v '^#' "$OUT/$v/index.m3u8" | tail -1)
    [ "$(ffprobe -v error -select_streams v -show_entries packet=pts -of csv=p=0 \
        "$OUT/$v/$last" | wc -l)" -gt 0 ] || fail "$v: no picture in its last segment $last"
done
[ -f "$OUT/short/master.m3u8" ] || fail "short: no master playlist"
for r in 240p 120p; do
    check_media_playlist "$OUT/short/$r/index.m3u8" 2
    check_duration "$OUT/short/$r/index.m3u8" 6
done
check_no_staging
log "ok"
