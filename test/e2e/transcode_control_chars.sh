#!/usr/bin/env bash
# What the transcoder prints comes from uploads and programs: a file name, the error it led to,
# a server's message. On a terminal a control character in it would act (ESC [ 2 J clears the
# screen, ESC ] retitles the window, a C1 CSI acts as ESC [); every command shows it as an
# escape instead, as the hopper tool does.
source "$(dirname "$0")/lib/transcode.sh"

# bad FILE...: some file holds a raw ESC, BEL, CR or C1 CSI.
bad() { LC_ALL=C grep -q $'[\e\a\r]\|\xc2\x9b' "$@"; }

name=$'clip\e]0;owned\a\e[2J\r\xc2\x9b1m.mp4'
make_clip "$WORK/$name" 1 160x120 noaudio
"$BIN" submit "$WORK/$name" --id shown >"$WORK/submit.out" 2>"$WORK/submit.err" || fail "submit failed"
bad "$WORK/submit.err" && fail "submit sent control characters: $(od -c "$WORK/submit.err" | head -5)"
grep -q 'submitted: .*clip\\x1B\]0;owned\\x07\\x1B\[2J \\u009B1m\.mp4 (queue transcode)$' "$WORK/submit.err" ||
    fail "submit: $(cat "$WORK/submit.err")"

# The upload is gone by the time the worker looks: its name is in the failure, everywhere.
rm "$WORK/$name"
timeout 60 "$BIN" run --output-dir "$OUT" --exit-when-idle >"$WORK/worker.log" 2>&1 ||
    fail "worker exited with $?"
[ "$(video_field shown processing_status)" = failed ] || fail "row is $(video_field shown processing_status)"
bad "$WORK/worker.log" && fail "the worker sent control characters: $(od -c "$WORK/worker.log" | head -8)"
grep -q 'clip\\x1B\]0;owned\\x07\\x1B\[2J\\x0D\\u009B1m\.mp4: input file not found' "$WORK/worker.log" ||
    fail "worker log: $(cat "$WORK/worker.log")"

"$BIN" status shown >"$WORK/status.out" 2>&1 || fail "status failed: $(cat "$WORK/status.out")"
bad "$WORK/status.out" && fail "status sent control characters: $(od -c "$WORK/status.out" | head -8)"
grep -q '^raw file: .*clip\\x1B\]0;owned\\x07\\x1B\[2J \\u009B1m\.mp4$' "$WORK/status.out" ||
    fail "status raw file: $(cat "$WORK/status.out")"
grep -q '^error: .*clip\\x1B\]0;owned\\x07\\x1B\[2J\\x0D\\u009B1m\.mp4: input file not found' "$WORK/status.out" ||
    fail "status error: $(cat "$WORK/status.out")"

# Errors of the command itself: a usage error quoting its argument, a server's message.
rc=0
"$BIN" run --queue $'q\e[2J' >"$WORK/usage.out" 2>&1 || rc=$?
[ "$rc" = 2 ] || fail "bad --queue: exit $rc"
bad "$WORK/usage.out" && fail "a usage error sent control characters: $(od -c "$WORK/usage.out" | head -5)"
grep -q 'q\\x1B\[2J' "$WORK/usage.out" || fail "usage error: $(head -3 "$WORK/usage.out")"
rc=0
"$BIN" status shown --dsn $'host=/no/such\e]0;owned\a' >"$WORK/conn.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || fail "no server: exit $rc"
bad "$WORK/conn.out" && fail "a connection error sent control characters: $(od -c "$WORK/conn.out" | head -5)"
grep -q 'no/such\\x1B\]0;owned\\x07' "$WORK/conn.out" || fail "connection error: $(cat "$WORK/conn.out")"
log "ok"
