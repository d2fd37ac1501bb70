#!/usr/bin/env bash
# hopper-transcode's SQL calls no operator planted in public: for types pg_catalog has no exact
# operator for (numeric * integer, text || bigint, hopper.job_state = ...), one created there
# would be chosen over pg_catalog's and run as the worker's role. The worker encodes a video and
# records it, and `status` settles a cancelled job's row, with every such operator planted.
source "$(dirname "$0")/lib/transcode.sh"

psql -X -q -v ON_ERROR_STOP=1 -f "$REPO/sql/include/plant_operators.sql" >/dev/null
calls() { sql "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.planted_calls"; }

make_clip "$WORK/clip.mp4" 1 160x120 noaudio
"$BIN" submit "$WORK/clip.mp4" --id encoded >/dev/null 2>"$WORK/submit.log" || fail "submit failed"
cancelled=$("$BIN" submit "$WORK/clip.mp4" --id cancelled 2>>"$WORK/submit.log") ||
    fail "submit failed"
sql "SELECT hopper.queue_cancel($cancelled)" >/dev/null
timeout 60 "$BIN" run --output-dir "$OUT" --preset ultrafast --max-jobs 1 >"$WORK/run.log" 2>&1 ||
    fail "worker exited with $?"
video_is encoded processed || fail "video encoded is $(video_field encoded processing_status)"
"$BIN" status encoded >"$WORK/status.log" 2>&1 || fail "status exited with $?"
"$BIN" status encoded --json >"$WORK/status_json.log" 2>&1 || fail "status --json exited with $?"
"$BIN" status cancelled >"$WORK/cancelled.log" 2>&1 || fail "status of the cancelled video exited with $?"
video_is cancelled failed || fail "video cancelled is $(video_field cancelled processing_status)"
[ "$(calls)" = 0 ] || fail "$(calls) planted operators called"
log "ok"
