#!/usr/bin/env bash
# A worker killed on a job's last attempt leaves its half-written stream in a hidden staging
# directory. When `status` (or a second `submit`) settles the row as failed first, no worker ever
# settles it again, yet the next worker on that output directory still removes the leftovers:
# every pass (at start, then every 15 s) sweeps the staging directories of videos not processing.
# One of a video whose encode runs right now, in another worker sharing the directory, stays.
source "$(dirname "$0")/lib/transcode.sh"

make_clip "$WORK/clip.mp4" 6
staging_of() { ls -A "$OUT" 2>/dev/null | grep -q "^\.$1\.partial-"; }

# --- dead on its only attempt, settled by status ------------------------------------------------
job=$("$BIN" submit "$WORK/clip.mp4" --id crash --max-attempts 1)
start_worker first --preset veryslow --threads 1 --hls-time 2 --lease 20s
first=$WORKER_PID
wait_until 30 "the encode of the last attempt to start" encoding "$job"
kill -9 "$first"
wait "$first" 2>/dev/null || true
wait_until 20 "the reaper to bury the job" job_is "$job" dead
"$BIN" status crash >"$WORK/status.out" || fail "status exited with $?"
grep -q '^status: *failed' "$WORK/status.out" || fail "status did not settle the row: $(cat "$WORK/status.out")"
staging_of crash || fail "the killed encode left no staging directory to sweep"

# --- the next worker on the directory sweeps it at start ------------------------------------------
live=$("$BIN" submit "$WORK/clip.mp4" --id live)
start_worker busy --preset veryslow --threads 1 --hls-time 2
busy=$WORKER_PID
wait_until 30 "the next encode to start" encoding "$live"
staging_of crash && fail "the staging directory of the failed video was not swept: $(ls -A "$OUT")"
grep -q "video crash: removed .*/\.crash\.partial-.*, left by an encode cut short" "$WORK/busy.log" ||
    fail "the sweep was not reported"
staging_of live || fail "the live encode has no staging directory"

# --- but not the directory of an encode that runs, in another worker sharing it -----------------
# A worker of another queue on the same directory: it finds nothing to do and stops, after the
# pass it makes at start.
timeout 30 "$BIN" run --output-dir "$OUT" --queue other --poll-interval 300ms --exit-when-idle \
    >"$WORK/sweeper.log" 2>&1 || fail "the sweeping worker exited with $?"
staging_of live || fail "the sweep removed the staging directory of an encode that runs"
grep -q "removed" "$WORK/sweeper.log" && fail "the second sweep removed something: $(cat "$WORK/sweeper.log")"
kill -0 "$busy" 2>/dev/null || fail "the busy worker died"
job_is "$live" running || fail "the live job is $(job_field "$live" state)"
[ "$(video_field live processing_status)" = processing ] || fail "the live row is $(video_field live processing_status)"
log "ok"
