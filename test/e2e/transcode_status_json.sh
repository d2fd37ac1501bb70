#!/usr/bin/env bash
# `status --json` has one shape a script can rely on: {"video": {...}, "job": {...}}, with the job
# null when the server no longer knows it (its queue keeps no history) or the row names none.
source "$(dirname "$0")/lib/transcode.sh"

# json JSON EXPR: EXPR over the document `j`, read by the server.
json() { printf '%s\n' "SELECT $2 FROM (SELECT :'j'::jsonb AS j) s;" | psql -X -A -t -q -v ON_ERROR_STOP=1 -v j="$1"; }
# shape JSON: its top-level keys, and the type of each.
shape() { json "$1" "(SELECT string_agg(k || ':' || jsonb_typeof(j -> k), ' ' ORDER BY k) FROM jsonb_object_keys(j) k)"; }

# --- the job known (waiting) -------------------------------------------------------------------
job=$("$BIN" submit "$WORK/clip.mp4" --id known)
out=$("$BIN" status known --json) || fail "status --json exited with $?"
[ "$(shape "$out")" = "job:object video:object" ] || fail "status --json of a waiting job: $out"
[ "$(json "$out" "j #>> '{video,id}'")" = known ] || fail "video id: $out"
[ "$(json "$out" "j #>> '{job,id}'")" = "$job" ] || fail "job id: $out"
[ "$(json "$out" "j #>> '{job,state}'")" = available ] || fail "job state: $out"
[ "$(json "$out" "j -> 'job' ? 'payload'")" = f ] || fail "the job carries its payload: $out"

# --- the job gone: ended in a queue that keeps no history --------------------------------------
sql "SELECT hopper.queue_create('forget', retention => '0')" >/dev/null
job=$("$BIN" submit "$WORK/clip.mp4" --queue forget --id gone)
sql "SELECT hopper.queue_cancel($job)" >/dev/null
out=$("$BIN" status gone --json) || fail "status --json exited with $?"
[ "$(shape "$out")" = "job:null video:object" ] || fail "status --json of a forgotten job: $out"
[ "$(json "$out" "j #>> '{video,processing_status}'")" = failed ] || fail "the row was not settled: $out"
[ "$(json "$out" "j #>> '{video,job_id}'")" = "$job" ] || fail "job_id: $out"

# --- a row that names no job -------------------------------------------------------------------
sql "INSERT INTO transcode.videos (id, raw_file_path, processing_status) VALUES ('nojob', '/x.mp4', 'failed')"
out=$("$BIN" status nojob --json) || fail "status --json exited with $?"
[ "$(shape "$out")" = "job:null video:object" ] || fail "status --json of a row without a job: $out"
[ "$(json "$out" "j #>> '{video,id}'")" = nojob ] || fail "video id: $out"

# --- no such video: null, as before ------------------------------------------------------------
out=$("$BIN" status none --json 2>/dev/null) && fail "status --json of an unknown video succeeded"
[ "$out" = null ] || fail "status --json of an unknown video printed '$out'"
log "ok"
