#!/usr/bin/env bash
# Inputs that can never work fail at once, clearly, without retries: a corrupt file, a missing
# file, a file with no video, an upload cut short, an upload that names other files to read (by
# its contents or by its name), a still picture, a picture too small to encode. The row says
# failed with the reason; the job is dead at attempt 1.
source "$(dirname "$0")/lib/transcode.sh"

# Fixed noise (drand48 from a fixed seed): fresh random bytes now and then look enough like some
# container to ffprobe (1 run in 40 here) that it reads them and finds no video stream instead.
perl -e 'srand(7); print map { chr int rand 256 } 1 .. 200000' >"$WORK/corrupt.mp4"
make_clip "$WORK/good.mp4" 2
# Half a file: the header promises more than is there.
head -c 2000 "$WORK/good.mp4" >"$WORK/truncated.mp4"
ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i sine=frequency=440 -t 2 "$WORK/tone.m4a"
# Half an upload whose index comes first (faststart): ffprobe reads the full 20 s from the header
# and ffmpeg encodes what is there, says "partial file" and exits 0.
make_clip "$WORK/long.mp4" 20 320x180
ffmpeg -hide_banner -nostdin -loglevel error -i "$WORK/long.mp4" -c copy -movflags +faststart \
    "$WORK/faststart.mp4"
head -c $(($(stat -c %s "$WORK/faststart.mp4") / 2)) "$WORK/faststart.mp4" >"$WORK/halved.mp4"
# Uploads whose contents would have ffmpeg read other files on the worker and publish them as the
# upload's stream: an HLS playlist naming a file by its absolute path, an ffconcat list naming a
# neighbour. Both are whole and valid for ffmpeg, and named .mp4.
mkdir "$WORK/private"
make_clip "$WORK/private/secret.ts" 2 160x90 noaudio
printf '#EXTM3U\n#EXT-X-TARGETDURATION:2\n#EXTINF:2.0,\n%s\n#EXT-X-ENDLIST\n' \
    "$WORK/private/secret.ts" >"$WORK/playlist.mp4"
printf 'ffconcat version 1.0\nfile good.mp4\n' >"$WORK/list.mp4"
# A picture named with %d next to numbered ones: ffmpeg's image2 reads them all as frames.
ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i "testsrc=size=160x90" -frames:v 1 \
    "$WORK/private/secret0.jpg"
for i in 1 2 3 4 5 6 7 8 9 %d; do cp "$WORK/private/secret0.jpg" "$WORK/private/secret$i.jpg"; done
# Pictures, though ffprobe gives them a length: a JPEG (one frame's, 0.04 s), a GIF of one frame
# (its delay), an MP4 of one frame and no sound.
cp "$WORK/private/secret0.jpg" "$WORK/still.jpg"
ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i "testsrc=size=160x90" -frames:v 1 \
    "$WORK/still.gif"
ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i "testsrc=size=160x90" -frames:v 1 \
    -c:v libx264 -preset ultrafast -pix_fmt yuv420p "$WORK/frame.mp4"
# A picture of one pixel, or one line: H.264 has no even size to give it.
ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i "testsrc=size=1x1:rate=25" -t 1 -c:v ffv1 \
    "$WORK/dot.mkv"
ffmpeg -hide_banner -nostdin -loglevel error -f lavfi -i "testsrc=size=64x1:rate=25" -t 1 \
    -c:v ffv1 "$WORK/line.mkv"

declare -A jobs expect
jobs[corrupt]=$("$BIN" submit "$WORK/corrupt.mp4" --id corrupt)
expect[corrupt]="not a readable video"
jobs[truncated]=$("$BIN" submit "$WORK/truncated.mp4" --id truncated)
expect[truncated]="not a readable video"
jobs[missing]=$("$BIN" submit "$WORK/no-such-file.mp4" --id missing)
expect[missing]="input file not found"
jobs[audio]=$("$BIN" submit "$WORK/tone.m4a" --id audio)
expect[audio]="no video stream"
jobs[halved]=$("$BIN" submit "$WORK/halved.mp4" --id halved)
expect[halved]="the input ends early"
jobs[playlist]=$("$BIN" submit "$WORK/playlist.mp4" --id playlist)
expect[playlist]="playlist.mp4: not a video file (read as hls, which is not one of the accepted"
jobs[list]=$("$BIN" submit "$WORK/list.mp4" --id list)
expect[list]="list.mp4: not a video file (read as concat, which is not one of the accepted"
jobs[pattern]=$("$BIN" submit "$WORK/private/secret%d.jpg" --id pattern)
expect[pattern]="secret%d.jpg: not a video (a still image, or a numbered sequence of them: image2)"
jobs[jpeg]=$("$BIN" submit "$WORK/still.jpg" --id jpeg)
expect[jpeg]="still.jpg: not a video (a still image"
jobs[gif]=$("$BIN" submit "$WORK/still.gif" --id gif)
expect[gif]="still.gif: not a video (a still image, gif)"
jobs[frame]=$("$BIN" submit "$WORK/frame.mp4" --id frame)
expect[frame]="frame.mp4: not a video (a still image, h264)"
jobs[dot]=$("$BIN" submit "$WORK/dot.mkv" --id dot)
expect[dot]="dot.mkv: picture too small to encode (1x1; H.264 needs at least 2x2 pixels)"
jobs[line]=$("$BIN" submit "$WORK/line.mkv" --id line)
expect[line]="line.mkv: picture too small to encode (64x1;"

timeout 60 "$BIN" run --output-dir "$OUT" --hls-time 1 --preset ultrafast --exit-when-idle \
    >"$WORK/worker.log" 2>&1 || fail "worker exited with $?"

for v in corrupt truncated missing audio halved playlist list pattern jpeg gif frame dot line; do
    j=${jobs[$v]}
    [ "$(video_field "$v" processing_status)" = failed ] || fail "$v: row is $(video_field "$v" processing_status)"
    video_field "$v" error | grep -q "${expect[$v]}" || fail "$v: row error is: $(video_field "$v" error)"
    [ "$(job_field "$j" state)" = dead ] || fail "$v: job is $(job_field "$j" state)"
    [ "$(job_field "$j" attempt)" = 1 ] || fail "$v: job retried (attempt $(job_field "$j" attempt))"
    job_field "$j" last_error | grep -q "${expect[$v]}" || fail "$v: job error is: $(job_field "$j" last_error)"
    [ ! -e "$OUT/$v" ] || fail "$v: output published for a failed video"
    [ -z "$(video_field "$v" processed_file_path)" ] || fail "$v: processed_file_path set"
done
check_no_staging

# A failed video may be submitted again (say, after a fixed upload): a new job, pending again.
cp "$WORK/good.mp4" "$WORK/corrupt.mp4"
again=$("$BIN" submit "$WORK/corrupt.mp4" --id corrupt)
[ "$again" != "${jobs[corrupt]}" ] || fail "resubmission reused the dead job"
[ "$(video_field corrupt "processing_status || coalesce(error, '')")" = pending ] || fail "resubmitted row not reset"
timeout 60 "$BIN" run --output-dir "$OUT" --hls-time 1 --preset ultrafast --max-jobs 1 \
    >"$WORK/worker2.log" 2>&1 || fail "second worker exited with $?"
[ "$(video_field corrupt processing_status)" = processed ] || fail "resubmitted video not processed"
check_media_playlist "$OUT/corrupt/index.m3u8" 1
log "ok"
