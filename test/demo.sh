#!/usr/bin/env bash
# make demo: the job hopper exists for. A local cluster with the extension, a generated clip
# submitted like a web API would, hopper-transcode turning it into an HLS ladder while reporting
# progress, then the result: where the playlist is, what ffprobe sees, what the queue recorded.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cluster="$repo/test/cluster.sh"
bin="$repo/client/build/transcode/hopper-transcode"
out="$repo/.hopper/demo-output"
queue=transcode

step() { printf '\n== %s ==\n' "$*"; }

[ -x "$bin" ] || { echo "demo: $bin is missing; run make first" >&2; exit 1; }
$cluster start
eval "$($cluster env)"
export PGHOST PGPORT PGUSER PGDATABASE
# The version stays 0.1.0 while the install script changes, so a demo cluster made by an older
# build would keep the older SQL objects: when the script changed since this cluster installed it,
# restart the server (no backend or reaper keeps the old library) and install afresh.
script_sum=$(md5sum "$repo/extension/hopper--0.1.0.sql" | cut -d' ' -f1)
sum_file="$($cluster instancedir)/extension.md5"
if [ "$(cat "$sum_file" 2>/dev/null)" != "$script_sum" ]; then
    if [ "$(psql -XAtq -c "SELECT count(*) FROM pg_catalog.pg_extension WHERE extname = 'hopper'")" != 0 ]; then
        echo "demo: the extension's install script changed since this cluster installed it; reinstalling"
        $cluster restart >/dev/null
        psql -X -q -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" \
            -c "DROP EXTENSION hopper CASCADE"
    fi
fi
psql -X -q -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" \
    -c "CREATE EXTENSION IF NOT EXISTS hopper"
echo "$script_sum" >"$sum_file"

step "1. a sample upload: 6 s of moving test picture with a 440 Hz tone (ffmpeg lavfi)"
mkdir -p "$out/uploads" "$out/hls"
video_id="demo-$(date -u +%Y%m%d-%H%M%S)"
clip="$out/uploads/$video_id.mp4"
ffmpeg -hide_banner -nostdin -loglevel error -y -f lavfi -i testsrc2=size=1280x720:rate=25 \
    -f lavfi -i sine=frequency=440 -t 6 -c:v libx264 -preset ultrafast -pix_fmt yuv420p \
    -c:a aac "$clip"
echo "$clip ($(du -h "$clip" | cut -f1))"

step "2. the web API's part: hopper-transcode submit (video row + job, one transaction)"
echo "\$ hopper-transcode submit $clip --id $video_id"
job=$("$bin" submit "$clip" --id "$video_id")
echo "job id: $job"

step "3. a worker: hopper-transcode run --ladder --hls-time 2 --max-jobs 1"
"$bin" run --queue "$queue" --output-dir "$out/hls" --ladder --hls-time 2 --max-jobs 1

step "4. the result"
"$bin" status "$video_id"
playlist=$(psql -X -A -t -c "SELECT processed_file_path FROM transcode.videos WHERE id = '$video_id'")
echo
echo "Play it:  ffplay $playlist"
echo "Files:"
(cd "$(dirname "$playlist")" && find . -type f | sort | sed -n "1,20s/^/  /p")

step "ffprobe $playlist"
ffprobe -hide_banner "$playlist" 2>&1 | grep -E '^ *(Input|Duration|Program|Stream)'

step "the job (hopper.job_status) and the queue (hopper.queue_stats)"
psql -X -q -P pager=off -c "SELECT id, kind, state, attempt, worker, round(progress::numeric, 2) AS progress,
       finished_at - started_at AS took, result->>'playlist' AS playlist
  FROM hopper.job_status($job)" \
    -c "SELECT queue, available, running, completed, dead, cancelled FROM hopper.queue_stats('$queue')"

echo "Outputs are under $out. The cluster keeps running: $($cluster status)."
echo "Stop it with: test/cluster.sh stop"
