#!/usr/bin/env bash
# hopper-transcode, default recipe: one H.264/AAC rendition, a VOD playlist with segments of
# --hls-time, the video row processed in the same transaction as the job's completion.
source "$(dirname "$0")/lib/transcode.sh"

make_clip "$WORK/clip.mp4" 4
job=$("$BIN" submit "$WORK/clip.mp4" --id clip-1)
[ "$(video_field clip-1 processing_status)" = pending ] || fail "row not pending after submit"
[ "$(job_field "$job" "payload->>'video_id'")" = clip-1 ] || fail "payload lacks video_id"
[ "$(job_field "$job" "payload->>'path'")" = "$WORK/clip.mp4" ] || fail "payload lacks the path"
[ "$(job_field "$job" kind)" = process_raw_video ] || fail "wrong job kind"

# The same video cannot be submitted twice while it is pending.
if "$BIN" submit "$WORK/clip.mp4" --id clip-1 2>"$WORK/dup.err"; then fail "duplicate submit accepted"; fi
grep -q "already exists (pending)" "$WORK/dup.err" || fail "duplicate submit: $(cat "$WORK/dup.err")"

timeout 60 "$BIN" run --output-dir "$OUT" --hls-time 1 --preset ultrafast --max-jobs 1 \
    >"$WORK/worker.log" 2>&1 || fail "worker exited with $?"

playlist="$OUT/clip-1/index.m3u8"
[ "$(video_field clip-1 processing_status)" = processed ] || fail "row not processed"
[ "$(video_field clip-1 processed_file_path)" = "$playlist" ] || fail "processed_file_path wrong"
[ "$(video_field clip-1 "width || 'x' || height")" = 640x360 ] || fail "dimensions not recorded"
[ "$(video_field clip-1 "round(duration)")" = 4 ] || fail "duration not recorded"
[ "$(video_field clip-1 "jsonb_array_length(renditions)")" = 1 ] || fail "renditions not recorded"
[ "$(job_field "$job" state)" = completed ] || fail "job not completed"
[ "$(job_field "$job" attempt)" = 1 ] || fail "job took more than one attempt"
[ "$(job_field "$job" "result->>'playlist'")" = "$playlist" ] || fail "job result lacks the playlist"
[ "$(job_field "$job" progress)" = 1 ] || fail "final progress not 1"
grep -q "video clip-1:  *[0-9]*% " "$WORK/worker.log" || fail "no progress lines in the worker's output"
# Done once the stream is checked: the whole length, said once, after ffmpeg's own last word.
[ "$(job_field "$job" "progress_detail->>'position' = progress_detail->>'duration'")" = t ] ||
    fail "final progress detail: $(job_field "$job" progress_detail)"
[ "$(grep -c "video clip-1: 100% (4.0s of 4.0s" "$WORK/worker.log")" = 1 ] ||
    fail "done not said once: $(grep "%" "$WORK/worker.log")"

check_media_playlist "$playlist" 1
check_duration "$playlist" 4
check_no_staging
streams=$(ffprobe -v error -show_entries stream=codec_name -of csv=p=0 "$playlist" | grep . | sort -u | tr '\n' ' ')
[ "$streams" = "aac h264 " ] || fail "streams are '$streams', expected H.264 and AAC"

"$BIN" status clip-1 >"$WORK/status.out"
grep -q "^status: *processed" "$WORK/status.out" || fail "status: $(cat "$WORK/status.out")"
grep -q "completed, attempt 1" "$WORK/status.out" || fail "status lacks the job"
"$BIN" status clip-1 --json | grep -q '"processing_status": "processed"' || fail "status --json"
if "$BIN" status no-such-video 2>/dev/null; then fail "status of an unknown video succeeded"; fi
unknown=$("$BIN" status no-such-video --json 2>/dev/null) && fail "status --json of an unknown video succeeded"
[ "$unknown" = null ] || fail "status --json of an unknown video printed '$unknown', not null"
log "ok: $playlist"
