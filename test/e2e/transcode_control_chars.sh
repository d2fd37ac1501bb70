#!/usr/bin/env bash
# What the transcoder prints comes from uploads and programs: a file name, the error it led to,
# a server's message. On a terminal a control character in it would act (ESC [ 2 J clears the
# screen, ESC ] retitles the window, a C1 CSI acts as ESC [); every command shows it as an
# escape instead, as the hopper tool does. A line break in a file name is one too: an error keeps
# its lines, but a name never starts one.
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

# A name with line breaks would start lines of its own making, worded like the worker's: one per
# way it is shown, in the worker's own line (probing), its error (missing) and ffprobe's (junk;
# ctl, whose other control characters ffprobe prints as '?').
sql "TRUNCATE transcode.videos"
forged=$'\njob 99 video forged: processed in 0.1s\n'
make_clip "$WORK/ok${forged}.mp4" 1 160x120 noaudio
head -c 5000 /dev/zero >"$WORK/junk${forged}.mp4"
head -c 5000 /dev/zero >"$WORK/ctl${forged}"$'\x01\e.mp4'
for v in ok missing junk; do "$BIN" submit "$WORK/$v${forged}.mp4" --id "nl_$v" >/dev/null 2>&1; done
"$BIN" submit "$WORK/ctl${forged}"$'\x01\e.mp4' --id nl_ctl >/dev/null 2>&1
timeout 60 "$BIN" run --output-dir "$OUT" --exit-when-idle >"$WORK/lines.log" 2>&1 ||
    fail "worker exited with $?"
[ "$(video_field nl_ok processing_status)" = processed ] || fail "nl_ok: $(video_field nl_ok error)"
for v in missing junk ctl; do
    [ "$(video_field "nl_$v" processing_status)" = failed ] || fail "nl_$v: row is $(video_field "nl_$v" processing_status)"
    "$BIN" status "nl_$v" >>"$WORK/lines.log" 2>&1 || fail "status nl_$v failed"
done
grep -q '^job 99' "$WORK/lines.log" && fail "a file name forged a line: $(cat "$WORK/lines.log")"
shown='\\x0Ajob 99 video forged: processed in 0\.1s\\x0A\.mp4'
grep -q "probing .*ok$shown$" "$WORK/lines.log" || fail "no escaped name: $(cat "$WORK/lines.log")"
grep -q "missing$shown: input file not found" "$WORK/lines.log" || fail "missing: $(cat "$WORK/lines.log")"
grep -q "^error: .*junk$shown: not a readable video (ffprobe exited with status 1)" "$WORK/lines.log" ||
    fail "junk: $(cat "$WORK/lines.log")"
grep -q "^file:.*junk$shown: Invalid data found" "$WORK/lines.log" || fail "junk, ffprobe: $(cat "$WORK/lines.log")"
# The worker shows the other control characters escaped; ffprobe printed them as '?'.
ctl='ctl\\x0Ajob 99 video forged: processed in 0\.1s\\x0A'
grep -q "^error: .*$ctl\\\\x01\\\\x1B\.mp4: not a readable video" "$WORK/lines.log" ||
    fail "ctl: $(cat "$WORK/lines.log")"
grep -q "^file:.*$ctl??\.mp4: Invalid data found" "$WORK/lines.log" ||
    fail "ctl, ffprobe: $(cat "$WORK/lines.log")"

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
