#!/usr/bin/env bash
# Names that are not UTF-8 (a Latin-1 file name, say): the database holds paths and names as
# text, which must be UTF-8. Each is refused at once with a message naming it (its stray bytes as
# \xNN), never with the server's "invalid byte sequence", never after an encode, and never by a
# job that is retried until it dies.
source "$(dirname "$0")/lib/transcode.sh"

make_clip "$WORK/good.mp4" 2
latin1=$(printf 'v\xff.mp4')
cp "$WORK/good.mp4" "$WORK/$latin1"
rows() { sql "SELECT count(*) FROM transcode.videos"; }
# expect_refused RC PATTERN COMMAND...: COMMAND exits RC and says PATTERN, in its own words.
expect_refused() {
    local want=$1 pattern=$2 rc=0
    shift 2
    "$@" >"$WORK/out.txt" 2>"$WORK/err.txt" || rc=$?
    [ "$rc" = "$want" ] || fail "exit $rc, expected $want, from: $* ($(cat "$WORK/err.txt"))"
    grep -qF -- "$pattern" "$WORK/err.txt" || fail "no \"$pattern\" in: $(cat "$WORK/err.txt")"
    if grep -q "invalid byte sequence" "$WORK/err.txt"; then fail "the server's words: $(cat "$WORK/err.txt")"; fi
}

# --- submit: the file's name, the queue's --------------------------------------------------
"$BIN" submit "$WORK/good.mp4" --id first >/dev/null # creates the table and the queue
expect_refused 2 "FILE \"$WORK/v\\xFF.mp4\" is not valid UTF-8" "$BIN" submit "$WORK/$latin1" --id latin1
expect_refused 2 "FILE \"$WORK/v\\xFF.mp4\" is not valid UTF-8" "$BIN" submit -- "$WORK/$latin1"
[ "$(rows)" = 1 ] || fail "a refused submit left a row"
[ "$(sql "SELECT count(*) FROM hopper.queue_jobs('transcode')")" = 1 ] || fail "a refused submit pushed a job"
expect_refused 2 '--queue: invalid queue name "q\xFF"' "$BIN" submit "$WORK/good.mp4" --queue "$(printf 'q\xff')"
expect_refused 1 'invalid video id "v\xFF"' "$BIN" status "$(printf 'v\xff')"

# A session of another encoding (PGCLIENTENCODING) has the server convert from it: there the
# same name is a Latin-1 "vÿ.mp4", stored as such, and a worker of that encoding finds the file.
PGCLIENTENCODING=LATIN1 "$BIN" submit "$WORK/$latin1" --id latin1 --queue latin1 >/dev/null ||
    fail "a Latin-1 session could not submit a Latin-1 name"
[ "$(video_field latin1 raw_file_path)" = "$WORK/vÿ.mp4" ] || fail "stored as $(video_field latin1 raw_file_path)"
PGCLIENTENCODING=LATIN1 timeout 60 "$BIN" run --queue latin1 --output-dir "$OUT" --preset ultrafast \
    --max-jobs 1 >"$WORK/latin1.log" 2>&1 || fail "the Latin-1 worker exited with $?"
[ "$(video_field latin1 processing_status)" = processed ] || fail "Latin-1 video: $(video_field latin1 "processing_status || ' ' || coalesce(error, '')")"

# --- run: what it would write into every row or job, checked before it takes one -------------
expect_refused 2 "--output-dir \"$WORK/out\\xFF\" is not valid UTF-8" \
    timeout 30 "$BIN" run --output-dir "$WORK/$(printf 'out\xff')" --exit-when-idle
[ ! -e "$WORK/$(printf 'out\xff')" ] || fail "a refused worker created its output directory"
expect_refused 2 '--name "w\xFF" is not valid UTF-8' \
    timeout 30 "$BIN" run --output-dir "$OUT" --name "$(printf 'w\xff')" --exit-when-idle
expect_refused 2 '--queue: invalid queue name "q\xFF"' \
    timeout 30 "$BIN" run --output-dir "$OUT" --queue "$(printf 'q\xff')" --exit-when-idle
[ "$(video_field first processing_status)" = pending ] || fail "a refused worker touched the video"
[ "$(job_field "$(video_field first job_id)" state)" = available ] || fail "a refused worker took the job"

# --- a failure whose text is not UTF-8 is still recorded: an ffmpeg (by a Latin-1 path) gone
# between the worker's start-up check and the job -----------------------------------------
ffmpeg_latin1="$WORK/$(printf 'ffmpeg\xe9')"
printf '#!/bin/sh\nexec ffmpeg "$@"\n' >"$ffmpeg_latin1"
chmod +x "$ffmpeg_latin1"
sql "SELECT hopper.queue_cancel($(video_field first job_id))" >/dev/null
start_worker gone --ffmpeg "$ffmpeg_latin1" --preset ultrafast --max-jobs 1
worker=$WORKER_PID
wait_until 30 "the worker to start" grep -q "^hopper-transcode: queue transcode" "$WORK/gone.log"
rm "$ffmpeg_latin1"
job=$("$BIN" submit "$WORK/good.mp4" --id gone-ffmpeg --max-attempts 1)
wait "$worker" || fail "worker exited with $?"
[ "$(video_field gone-ffmpeg processing_status)" = failed ] || fail "row is $(video_field gone-ffmpeg processing_status): $(video_field gone-ffmpeg error)"
video_field gone-ffmpeg error | grep -qF "ffmpeg"$'\xEF\xBF\xBD' || fail "row error: $(video_field gone-ffmpeg error)"
[ "$(job_field "$job" state)" = dead ] || fail "job is $(job_field "$job" state)"
log "ok"
