#!/usr/bin/env bash
# --max-jobs N takes N jobs at most, whatever --concurrency: the worker claimed a job for each
# free encoder and stopped only when the Nth was done, by when it had encoded the others too.
# The jobs it does not take stay available, never claimed and given back.
source "$(dirname "$0")/lib/transcode.sh"

make_clip "$WORK/clip.mp4" 1 160x120 noaudio
for i in 1 2 3 4; do "$BIN" submit "$WORK/clip.mp4" --queue mjq --id "v$i" >/dev/null 2>&1 ||
    fail "submit v$i failed"; done
# states: the queue's jobs as "completed available running", and the processed videos.
states() {
    sql "SELECT completed || ' ' || available || ' ' || running FROM hopper.queue_stats('mjq')"
}
processed() { sql "SELECT count(*) FROM transcode.videos WHERE processing_status = 'processed'"; }

timeout 60 "$BIN" run --queue mjq --output-dir "$OUT" --preset ultrafast --max-jobs 1 \
    --concurrency 3 >"$WORK/one.log" 2>&1 || fail "worker exited with $?"
[ "$(states)" = "1 3 0" ] || fail "--max-jobs 1 --concurrency 3: jobs completed/available/running $(states)"
[ "$(processed)" = 1 ] || fail "--max-jobs 1: $(processed) videos processed"
grep -q "stopped (1 completed, 0 failed, 0 lost, 0 released)" "$WORK/one.log" ||
    fail "--max-jobs 1: $(tail -1 "$WORK/one.log")"

# More than one pull: two encoders, three jobs.
timeout 60 "$BIN" run --queue mjq --output-dir "$OUT" --preset ultrafast --max-jobs 2 \
    --concurrency 2 >"$WORK/two.log" 2>&1 || fail "worker exited with $?"
[ "$(states)" = "3 1 0" ] || fail "--max-jobs 2 --concurrency 2: jobs completed/available/running $(states)"
[ "$(processed)" = 3 ] || fail "--max-jobs 2: $(processed) videos processed"
grep -q "stopped (2 completed, 0 failed, 0 lost, 0 released)" "$WORK/two.log" ||
    fail "--max-jobs 2: $(tail -1 "$WORK/two.log")"
log "ok"
