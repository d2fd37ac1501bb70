#!/usr/bin/env bash
# An --output-dir the worker cannot write its streams to stops it at start (exit 2, naming the
# option) before it takes a job, instead of failing every job it takes through all its attempts.
# A usable one is made if missing and left as it was found.
source "$(dirname "$0")/lib/transcode.sh"

make_clip "$WORK/clip.mp4" 1 160x120 noaudio
job=$("$BIN" submit "$WORK/clip.mp4" --id clip)
touch "$WORK/file"

# not_usable DIR WHY: the worker refuses DIR at start, and the job is left for a worker that can.
not_usable() {
    local rc=0
    timeout 60 "$BIN" run --output-dir "$1" --exit-when-idle >"$WORK/refused.log" 2>&1 || rc=$?
    [ "$rc" = 2 ] || fail "--output-dir $1 ($2): exit $rc, expected 2: $(cat "$WORK/refused.log")"
    grep -q -- "--output-dir: " "$WORK/refused.log" || fail "$2: no reason given: $(cat "$WORK/refused.log")"
    [ "$(job_field "$job" "state || '/' || attempt")" = available/0 ] ||
        fail "$2: the job was taken: $(job_field "$job" "state || '/' || attempt || ' ' || coalesce(last_error, '')")"
}

# /proc refuses new entries to everyone, root included.
not_usable /proc "a directory nobody may write to"
not_usable "$WORK/file" "a regular file"
not_usable "$WORK/file/out" "under a regular file"
# ffmpeg's segment templates give '%' a meaning: refused as typed, and as the working directory
# makes a relative one (the default ./hls included).
not_usable "$WORK/out%d" "a '%' in its name"
mkdir "$WORK/cwd%d"
(cd "$WORK/cwd%d" && not_usable hls "a relative directory under a '%' in the working directory")
grep -q -- "--output-dir: must not contain '%' (it is $WORK/cwd%d/hls)" "$WORK/refused.log" ||
    fail "relative --output-dir under a '%': $(cat "$WORK/refused.log")"
if [ "$(id -u)" != 0 ]; then  # root writes anywhere: mode bits keep only others out
    mkdir "$WORK/readonly"
    chmod 555 "$WORK/readonly"
    not_usable "$WORK/readonly" "a read-only directory"
fi

timeout 60 "$BIN" run --output-dir "$WORK/new/out" --hls-time 1 --preset ultrafast \
    --exit-when-idle >"$WORK/worker.log" 2>&1 || fail "worker exited with $?"
[ "$(video_field clip processing_status)" = processed ] || fail "clip not processed"
[ "$(ls -A "$WORK/new/out")" = clip ] || fail "left in the output directory: $(ls -A "$WORK/new/out")"
log "ok"
