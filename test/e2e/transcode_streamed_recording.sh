#!/usr/bin/env bash
# A recording streamed as it was made (a browser's MediaRecorder upload: WebM written to a pipe,
# so the muxer never went back to write the length) has no duration in its container or its
# streams. It is transcoded all the same, and the row and the job's result get the length the
# encode found. A picture, which has no length either, is still refused as not a video.
source "$(dirname "$0")/lib/transcode.sh"

# The inputs end by themselves: an output -t would let the muxer write the length up front.
ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i "testsrc2=size=320x180:rate=25:duration=4" \
    -f lavfi -i "sine=frequency=440:duration=4" -c:v libvpx -c:a libopus -f webm pipe:1 \
    >"$WORK/rec.webm"
[ "$(ffprobe -v error -show_entries format=duration -of csv=p=0 "$WORK/rec.webm")" = N/A ] ||
    fail "the recording declares a length: not the case under test"
ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i "testsrc2=size=64x48" -frames:v 1 \
    "$WORK/still.png"

job=$("$BIN" submit "$WORK/rec.webm" --id rec)
still=$("$BIN" submit "$WORK/still.png" --id still)
timeout 90 "$BIN" run --output-dir "$OUT" --hls-time 1 --preset ultrafast --threads 2 \
    --exit-when-idle >"$WORK/worker.log" 2>&1 || fail "worker exited with $?"

[ "$(video_field rec processing_status)" = processed ] ||
    fail "rec: row is $(video_field rec processing_status): $(video_field rec error)"
[ "$(job_field "$job" "state || '/' || attempt")" = completed/1 ] || fail "rec: job not completed at once"
check_media_playlist "$OUT/rec/index.m3u8" 1
check_duration "$OUT/rec/index.m3u8" 4
awk -v d="$(video_field rec duration)" 'BEGIN { exit !(d > 3.7 && d < 4.3) }' ||
    fail "rec: row duration $(video_field rec duration), expected about 4"
awk -v d="$(job_field "$job" "result->>'duration'")" 'BEGIN { exit !(d > 3.7 && d < 4.3) }' ||
    fail "rec: result $(job_field "$job" result)"
[ "$(video_field rec "width || 'x' || height")" = 320x180 ] || fail "rec: size $(video_field rec "width || 'x' || height")"
"$BIN" status rec | grep -qE '^source: +320x180, 4\.[0-9]{2}s$' || fail "rec: status $("$BIN" status rec)"
# While it encodes, the row has the probed size and no length yet: status says so.
sql "UPDATE transcode.videos SET duration = NULL WHERE id = 'rec'"
"$BIN" status rec | grep -qE '^source: +320x180, length unknown yet$' ||
    fail "rec: status while encoding $("$BIN" status rec)"

[ "$(video_field still processing_status)" = failed ] || fail "still: row is $(video_field still processing_status)"
video_field still error | grep -q "not a video (a still image" || fail "still: row error is: $(video_field still error)"
[ "$(job_field "$still" "state || '/' || attempt")" = dead/1 ] || fail "still: job $(job_field "$still" "state || '/' || attempt")"
check_no_staging
log "ok"
