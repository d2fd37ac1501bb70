#!/usr/bin/env bash
# Pictures shown otherwise than they are stored keep the shape a player gives them: a phone's
# portrait video (stored landscape, with a quarter turn to apply) stays portrait in every
# rendition, an anamorphic one (DVD's 720x480 with 32:27 pixels, shown 16:9) stays 16:9, and the
# row records the size as shown.
source "$(dirname "$0")/lib/transcode.sh"

# size_of PLAYLIST: the first video frame's size as decoded, WxH.
size_of() {
    ffprobe -v error -select_streams v:0 -show_entries stream=width,height -of csv=p=0:s=x "$1" |
        sed -n 1p
}

# display_aspect PLAYLIST: the first video frame's display aspect ratio (W:H).
display_aspect() {
    ffprobe -v error -select_streams v:0 -show_entries stream=display_aspect_ratio -of csv=p=0 "$1" |
        sed -n 1p
}

# A 320x180 clip stored with a rotation of 90 degrees, as phones write it: shown 180x320.
make_clip "$WORK/land.mp4" 3 320x180 noaudio
ffmpeg -hide_banner -nostdin -loglevel error -i "$WORK/land.mp4" -c copy \
    -metadata:s:v:0 rotate=90 "$WORK/portrait.mp4"

# 720x480 with pixels 32:27 wide: shown 853x480, 16:9.
ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i "testsrc2=size=720x480:rate=25" -t 3 \
    -vf setsar=32/27 -c:v libx264 -preset ultrafast -pix_fmt yuv420p "$WORK/dvd.mp4"

"$BIN" submit "$WORK/dvd.mp4" --id sar_ladder --queue ladder >/dev/null
"$BIN" submit "$WORK/dvd.mp4" --id sar_single --queue single >/dev/null
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

for v in sar_ladder sar_single; do
    [ "$(video_field $v processing_status)" = processed ] || fail "$v: row not processed"
    [ "$(video_field $v "width || 'x' || height")" = 853x480 ] ||
        fail "$v: row records $(video_field $v "width || 'x' || height"), shown 853x480"
done
# Square-pixel rungs as wide as the picture is shown: not 720x480 (3:2) or 270x180 stretched.
for r in 180p:320x180 90p:160x90; do
    pl="$OUT/sar_ladder/${r%%:*}/index.m3u8"
    [ "$(size_of "$pl")" = "${r#*:}" ] || fail "sar_ladder ${r%%:*} is $(size_of "$pl"), expected ${r#*:}"
    [ "$(display_aspect "$pl")" = 16:9 ] || fail "sar_ladder ${r%%:*} is shown $(display_aspect "$pl")"
done
# A single rendition keeps the source's pixels and their shape.
[ "$(size_of "$OUT/sar_single/index.m3u8")" = 720x480 ] || fail "sar_single is $(size_of "$OUT/sar_single/index.m3u8")"
[ "$(display_aspect "$OUT/sar_single/index.m3u8")" = 16:9 ] ||
    fail "sar_single is shown $(display_aspect "$OUT/sar_single/index.m3u8")"
check_no_staging
log "ok"
