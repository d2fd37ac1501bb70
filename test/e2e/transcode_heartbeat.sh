#!/usr/bin/env bash
# An encode that lasts several times the lease keeps its job: the lease is renewed while ffmpeg
# runs, so no second worker takes it over and it completes at the first attempt.
source "$(dirname "$0")/lib/transcode.sh"

make_clip "$WORK/clip.mp4" 8
job=$("$BIN" submit "$WORK/clip.mp4" --id long)
start=$(date +%s.%N)
start_worker main --preset veryslow --threads 1 --hls-time 2 --lease 2s --max-jobs 1
main=$WORKER_PID
wait_until 30 "the encode to start" encoding "$job"
# A second worker polls the queue the whole time, ready to take over an expired lease.
start_worker rival --preset ultrafast --lease 2s --exit-when-idle
rival=$WORKER_PID
for _ in $(seq 1 900); do kill -0 "$main" 2>/dev/null || break; sleep 0.1; done
kill -0 "$main" 2>/dev/null && fail "the encode did not finish within 90 s"
wait "$main" || fail "worker exited with $?"
took=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
wait "$rival" || fail "rival worker exited with $?"

[ "$(job_field "$job" "state || '/' || attempt")" = completed/1 ] ||
    fail "job $(job_field "$job" "state || '/' || attempt") after ${took}s"
[ "$(video_field long processing_status)" = processed ] || fail "row not processed"
if grep -q "video long: encoding" "$WORK/rival.log"; then fail "the rival worker encoded it too"; fi
check_media_playlist "$OUT/long/index.m3u8" 2
log "ok: encoded in ${took}s on a 2s lease"
awk -v t="$took" 'BEGIN { exit !(t > 4) }' || fail "encode took only ${took}s: not longer than the lease"
