#!/usr/bin/env bash
# Pictures shown otherwise than they are stored keep the shape a player gives them: a phone's
# portrait video (stored landscape, with a quarter turn to apply) stays portrait in every
# rendition, and the row records the size as shown.
source "$(dirname "$0")/lib/transcode.sh"

# size_of PLAYLIST: the first video frame's size as decoded, WxH.
size_of() {
    ffprobe -v error -select_streams v:0 -show_entries stream=width,height -of csv=p=0:s=x "$1" |
        sed -n 1p
}

# A 320x180 clip stored with a rotation of 90 degrees, as phones write it: shown 180x320.
make_clip "$WORK/land.mp4" 3 320x180 noaudio
ffmpeg -hide_banner -nostdin -loglevel error -i "$WORK/land.mp4" -c copy \
    -metadata:s:v:0 rotate=90 "$WORK/portrait.mp4"

"$BIN" submit "$WORK/portrait.mp4" --id rot_ladder --queue ladder >/dev/null
"$BIN" submit "$WORK/portrait.mp4" --id rot_single --queue single >/dev/null
timeout 90 "$BIN" run --queue ladder --output-dir "$OUT" --hls-time 1 --preset ultrafast \
    --threads 2 --ladder-heights 180,90 --exit-when-idle >"$WORK/ladder.log" 2>&1 ||
    fail "ladder worker exited with $?"
timeout 90 "$BIN" run --queue single --output-dir "$OUT" --hls-time 1 --preset ultrafast \
    --threads 2 --exit-when-idle >"$WORK/single.log" 2>&1 || fail "single worker exited with $?"

for v in rot_ladder rot_single; do
    [ "$(video_field $v processing_status)" = processed ] || fail "$v: row not processed"
    [ "$(video_field $v "width || 'x' || height")" = 180x320 ] ||
        fail "$v: row records $(video_field $v "width || 'x' || height"), shown 180x320"
done
# Rungs by the upright height, each as narrow as the portrait picture: not 320x180 squashed.
[ "$(video_field rot_ladder "jsonb_path_query_array(renditions, '\$[*].name')::text")" = '["180p", "90p"]' ] ||
    fail "rot_ladder renditions: $(video_field rot_ladder renditions)"
for r in 180p:102x180 90p:50x90; do
    [ "$(size_of "$OUT/rot_ladder/${r%%:*}/index.m3u8")" = "${r#*:}" ] ||
        fail "rot_ladder ${r%%:*} is $(size_of "$OUT/rot_ladder/${r%%:*}/index.m3u8"), expected ${r#*:}"
    [ "$(video_field rot_ladder "(SELECT r->>'width' || 'x' || (r->>'height') FROM jsonb_array_elements(renditions) r WHERE r->>'name' = '${r%%:*}')")" = "${r#*:}" ] ||
        fail "rot_ladder ${r%%:*} recorded as $(video_field rot_ladder renditions)"
done
grep -q 'RESOLUTION=102x180' "$OUT/rot_ladder/master.m3u8" || fail "master: $(cat "$OUT/rot_ladder/master.m3u8")"
[ "$(size_of "$OUT/rot_single/index.m3u8")" = 180x320 ] ||
    fail "rot_single is $(size_of "$OUT/rot_single/index.m3u8")"
[ "$(video_field rot_single "renditions->0->>'width' || 'x' || (renditions->0->>'height')")" = 180x320 ] ||
    fail "rot_single rendition recorded as $(video_field rot_single renditions)"
check_no_staging
log "ok"
