#!/usr/bin/env bash
# hopper-transcode --ladder: one rendition per configured height at or below the source's (never
# upscaled), each a valid VOD playlist, tied together by a master playlist.
source "$(dirname "$0")/lib/transcode.sh"

make_clip "$WORK/wide.mp4" 3 1280x720
make_clip "$WORK/small.mp4" 3 320x180 noaudio
job=$("$BIN" submit "$WORK/wide.mp4" --id wide)
job_small=$("$BIN" submit "$WORK/small.mp4" --id small)

timeout 90 "$BIN" run --output-dir "$OUT" --hls-time 1 --preset ultrafast --threads 2 \
    --ladder-heights 1080,720,360 --exit-when-idle >"$WORK/worker.log" 2>&1 ||
    fail "worker exited with $?"

master="$OUT/wide/master.m3u8"
[ "$(video_field wide processing_status)" = processed ] || fail "row not processed"
[ "$(video_field wide processed_file_path)" = "$master" ] || fail "processed_file_path is not the master"
[ "$(job_field "$job" "state || '/' || attempt")" = completed/1 ] || fail "job not completed at once"
[ "$(video_field wide "jsonb_path_query_array(renditions, '\$[*].name')::text")" = '["720p", "360p"]' ] ||
    fail "renditions: $(video_field wide renditions)"
[ ! -e "$OUT/wide/1080p" ] || fail "a 720p source was upscaled to 1080p"

[ "$(grep -c '^#EXT-X-STREAM-INF' "$master")" = 2 ] || fail "master playlist: $(cat "$master")"
grep -q 'RESOLUTION=1280x720' "$master" || fail "no 1280x720 variant in the master playlist"
grep -q 'RESOLUTION=640x360' "$master" || fail "no 640x360 variant in the master playlist"
check_duration "$master" 3
for r in 720p 360p; do
    check_media_playlist "$OUT/wide/$r/index.m3u8" 1
    check_duration "$OUT/wide/$r/index.m3u8" 3
    size=$(ffprobe -v error -select_streams v:0 -show_entries stream=width,height -of csv=p=0:s=x \
        "$OUT/wide/$r/index.m3u8" | sed -n 1p)
    [ "$size" = "$([ $r = 720p ] && echo 1280x720 || echo 640x360)" ] || fail "$r is $size"
done

# A source below every rung keeps its own size; without audio the variant has none either.
[ "$(video_field small processing_status)" = processed ] || fail "small: row not processed"
[ "$(job_field "$job_small" state)" = completed ] || fail "small: job not completed"
[ "$(video_field small "renditions->0->>'name'")" = 180p ] || fail "small: $(video_field small renditions)"
check_media_playlist "$OUT/small/180p/index.m3u8" 1
check_duration "$OUT/small/master.m3u8" 3
check_no_staging
log "ok: $master"
