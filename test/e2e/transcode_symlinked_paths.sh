#!/usr/bin/env bash
# The absolute paths submit and run record name what the kernel finds from where they were given:
# "up/../clip.mp4" with `up` a symbolic link is the clip next to the link's target, not one next
# to the link, and an --output-dir through such a link is where the stream goes. Only "." and
# repeated '/' are dropped.
source "$(dirname "$0")/lib/transcode.sh"

mkdir -p "$WORK/store/up" "$WORK/lk"
ln -s "$WORK/store/up" "$WORK/lk/up"
make_clip "$WORK/store/clip.mp4" 2
# Where a lexical reading of the names leads: nothing there.
[ ! -e "$WORK/lk/clip.mp4" ] && [ ! -e "$WORK/lk/hls" ] || fail "set-up"

job=$("$BIN" submit "$WORK/lk/up/../clip.mp4" --id linked)
[ "$(video_field linked raw_file_path)" = "$WORK/lk/up/../clip.mp4" ] ||
    fail "raw_file_path is $(video_field linked raw_file_path)"
[ "$(job_field "$job" "payload->>'path'")" = "$WORK/lk/up/../clip.mp4" ] ||
    fail "the payload's path is $(job_field "$job" "payload->>'path'")"
# A relative name from the working directory, its "." and doubled '/' dropped.
(cd "$WORK/store" && "$BIN" submit .//./clip.mp4 --id dotted >/dev/null) || fail "submit of ./clip.mp4"
[ "$(video_field dotted raw_file_path)" = "$WORK/store/clip.mp4" ] ||
    fail "raw_file_path of ./clip.mp4 is $(video_field dotted raw_file_path)"

timeout 60 "$BIN" run --output-dir "$WORK/lk/up/../hls" --hls-time 1 --preset ultrafast \
    --exit-when-idle >"$WORK/worker.log" 2>&1 || fail "worker exited with $?"
for v in linked dotted; do
    [ "$(video_field $v processing_status)" = processed ] ||
        fail "$v is $(video_field $v processing_status): $(video_field $v error)"
done
[ "$(video_field linked processed_file_path)" = "$WORK/lk/up/../hls/linked/index.m3u8" ] ||
    fail "processed_file_path is $(video_field linked processed_file_path)"
check_media_playlist "$WORK/store/hls/linked/index.m3u8" 1
check_duration "$WORK/store/hls/linked/index.m3u8" 2
[ ! -e "$WORK/lk/hls" ] || fail "the stream went next to the link"
log "ok"
