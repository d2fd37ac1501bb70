#!/usr/bin/env bash
# Two workers on one queue: every video is transcoded exactly once, by one of them, and each job
# completes at its first attempt.
source "$(dirname "$0")/lib/transcode.sh"

videos=(v1 v2 v3 v4 v5 v6)
make_clip "$WORK/clip.mp4" 2 320x180
for v in "${videos[@]}"; do cp "$WORK/clip.mp4" "$WORK/$v.mp4"; done
declare -A jobs
for v in "${videos[@]}"; do jobs[$v]=$("$BIN" submit "$WORK/$v.mp4" --id "$v"); done
# A second job for a video that already has one (pushed behind the transcoder's back) must not
# lead to a second encode: the row names the job allowed to process it.
rogue=$(sql "SELECT hopper.queue_push('transcode', jsonb_build_object('video_id', 'v1', 'path', '$WORK/v1.mp4'), kind => 'process_raw_video')")

start_worker a --preset ultrafast --hls-time 1 --threads 1 --exit-when-idle --name worker-a
a=$WORKER_PID
start_worker b --preset ultrafast --hls-time 1 --threads 1 --exit-when-idle --name worker-b
b=$WORKER_PID
wait "$a" || fail "worker a exited with $?"
wait "$b" || fail "worker b exited with $?"

for v in "${videos[@]}"; do
    j=${jobs[$v]}
    n=$(cat "$WORK/a.log" "$WORK/b.log" | grep -c "video $v: encoding" || true)
    [ "$n" = 1 ] || fail "$v was encoded $n times"
    [ "$(job_field "$j" "state || '/' || attempt")" = completed/1 ] ||
        fail "$v: job $(job_field "$j" "state || '/' || attempt")"
    [ "$(video_field "$v" processing_status)" = processed ] || fail "$v: row not processed"
    check_media_playlist "$OUT/$v/index.m3u8" 1
    # The job's worker is the one whose log says it encoded the video.
    w=$(job_field "$j" worker)
    grep -q "video $v: encoding" "$WORK/${w#worker-}.log" || fail "$v: done by $w but not in its log"
done
[ "$(job_field "$rogue" "state || '/' || attempt")" = dead/1 ] || fail "rogue job: $(job_field "$rogue" state)"
job_field "$rogue" last_error | grep -q "has no row for job $rogue" || fail "rogue job: $(job_field "$rogue" last_error)"
check_no_staging
na=$(grep -c ": processed in" "$WORK/a.log" || true)
nb=$(grep -c ": processed in" "$WORK/b.log" || true)
log "ok: worker a processed $na, worker b processed $nb"
[ $((na + nb)) = ${#videos[@]} ] || fail "processed $na + $nb, expected ${#videos[@]}"
