#!/usr/bin/env bash
# A real full disk: ffmpeg's HLS muxer ignores the write errors and exits 0, leaving empty
# playlists and segments. The worker must see that the stream is incomplete, publish nothing (an
# older good stream stays in place), and retry; the row is never processed.
# Needs a 1 MB tmpfs as the output directory: skipped where mounting one is not allowed.
source "$(dirname "$0")/lib/transcode.sh"

mkdir -p "$OUT"
if ! mount -t tmpfs -o size=1m hopper-e2e "$OUT" 2>/dev/null; then
    log "skipped: cannot mount a tmpfs here (needs root)"
    exit 0
fi
trap 'umount "$OUT" 2>/dev/null || true; cleanup' EXIT

make_clip "$WORK/clip.mp4" 20
# What an earlier, successful run of the same video published.
mkdir -p "$OUT/full"
echo "old stream" >"$OUT/full/index.m3u8"

for flags in "" "--ladder-heights 360,180"; do
    job=$("$BIN" submit "$WORK/clip.mp4" --id full --max-attempts 2)
    # shellcheck disable=SC2086 # flags are words
    timeout 120 "$BIN" run --output-dir "$OUT" --hls-time 2 --preset ultrafast --max-jobs 1 $flags \
        >"$WORK/worker.log" 2>&1 || fail "worker ($flags) exited with $?"
    case "$(job_field "$job" state)" in available | scheduled) ;; *) fail "job ($flags) is $(job_field "$job" state), expected a retry" ;; esac
    job_field "$job" last_error | grep -q "output is incomplete" || fail "job error ($flags): $(job_field "$job" last_error)"
    [ "$(video_field full processing_status)" = pending ] || fail "row ($flags) is $(video_field full processing_status)"
    video_field full error | grep -q "disk full?" || fail "row error ($flags): $(video_field full error)"
    [ "$(cat "$OUT/full/index.m3u8")" = "old stream" ] || fail "the older stream was replaced ($flags)"
    [ ! -e "$OUT/full/master.m3u8" ] || fail "an incomplete ladder was published"
    check_no_staging
    # Done with this run: the row fails so the video may be submitted again.
    sql "SELECT hopper.queue_cancel($job)" >/dev/null
    "$BIN" status full >/dev/null
done
log "ok"
