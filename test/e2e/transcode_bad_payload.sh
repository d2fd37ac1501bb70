#!/usr/bin/env bash
# A job pushed by hand (SQL, another language) whose payload lacks "video_id" or "path" as JSON
# strings fails at once, clearly: a number, an array or an object is not read as its text (a
# video_id 42 is not the video "42", ["/x.mp4"] not a file of that name). Dead at attempt 1.
source "$(dirname "$0")/lib/transcode.sh"

make_clip "$WORK/clip.mp4" 1
path=$WORK/clip.mp4
# Rows such payloads would name if read as text, each waiting for its job (every command creates
# the table first).
"$BIN" status none >/dev/null 2>&1 && fail "status of an unknown video succeeded"
for v in 42 v1 v2 v3; do
    sql "INSERT INTO transcode.videos (id, raw_file_path) VALUES ('$v', '$path')" >/dev/null
done
declare -A jobs
push() {
    local id
    id=$(sql "SELECT hopper.queue_push('transcode', '$2', kind => 'process_raw_video')")
    jobs[$1]=$id
    [ -z "$3" ] || sql "UPDATE transcode.videos SET job_id = $id WHERE id = '$3'" >/dev/null
}
push number "{\"video_id\": 42, \"path\": \"$path\"}" 42
push path_array "{\"video_id\": \"v1\", \"path\": [\"$path\"]}" v1
push path_number '{"video_id": "v2", "path": 7}' v2
push id_object "{\"video_id\": {\"id\": \"v3\"}, \"path\": \"$path\"}" v3
push no_path '{"video_id": "v4"}' ""

timeout 60 "$BIN" run --output-dir "$OUT" --hls-time 1 --preset ultrafast --exit-when-idle \
    >"$WORK/worker.log" 2>&1 || fail "worker exited with $?"
for k in "${!jobs[@]}"; do
    j=${jobs[$k]}
    [ "$(job_field "$j" state)" = dead ] || fail "$k: job is $(job_field "$j" state)"
    [ "$(job_field "$j" attempt)" = 1 ] || fail "$k: job retried (attempt $(job_field "$j" attempt))"
    job_field "$j" last_error | grep -qF 'payload needs "video_id" and "path" strings, got {' ||
        fail "$k: job error is: $(job_field "$j" last_error)"
done
# Nothing was encoded, and the rows were not claimed: each is settled with the job's reason.
[ -z "$(ls -A "$OUT")" ] || fail "output written: $(ls -A "$OUT")"
"$BIN" status 42 >"$WORK/status.out" || fail "status exited with $?"
grep -q '^status: *failed' "$WORK/status.out" || fail "status: $(cat "$WORK/status.out")"
video_field 42 error | grep -qF 'payload needs "video_id" and "path" strings' ||
    fail "row error: $(video_field 42 error)"
log "ok"
