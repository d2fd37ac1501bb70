# Shared set-up for the hopper-transcode end-to-end tests (sourced, not run).
#
# Gives each test its own database (the extension created there, dropped at exit), a scratch
# directory, helpers to make lavfi clips, start workers and check HLS output with ffprobe.
# Expects PGHOST/PGPORT/PGUSER for a running cluster with the extension installed.
set -euo pipefail

E2E_NAME=$(basename "$0" .sh)
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)
BIN="$REPO/client/build/transcode/hopper-transcode"
[ -x "$BIN" ] || { echo "missing $BIN: build first (make)" >&2; exit 1; }
export PGDATABASE="hopper_e2e_${E2E_NAME//[^a-z0-9_]/_}"
WORK=$(mktemp -d "/tmp/hopper-e2e-$E2E_NAME.XXXXXX")
OUT="$WORK/out"
WORKER_PIDS=()

log() { printf '[%s] %s\n' "$E2E_NAME" "$*"; }
fail() {
    printf '[%s] FAIL: %s\n' "$E2E_NAME" "$*" >&2
    for f in "$WORK"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 30 "$f" >&2; }; done
    exit 1
}

cleanup() {
    local pid
    for pid in "${WORKER_PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    for pid in "${WORKER_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $PGDATABASE WITH (FORCE)" >/dev/null 2>&1 || true
    rm -rf "$WORK"
}
trap cleanup EXIT

sql() { psql -X -A -t -q -v ON_ERROR_STOP=1 -c "$1"; }

psql -X -q -d postgres -v ON_ERROR_STOP=1 -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $PGDATABASE WITH (FORCE)" \
    -c "CREATE DATABASE $PGDATABASE" >/dev/null
sql "CREATE EXTENSION hopper" >/dev/null

# make_clip FILE SECONDS [SIZE] [noaudio]: a moving test picture with a tone.
make_clip() {
    local file=$1 secs=$2 size=${3:-640x360}
    local audio_in=(-f lavfi -i "sine=frequency=440") audio_out=(-c:a aac)
    if [ "${4:-}" = noaudio ]; then audio_in=() audio_out=(); fi
    ffmpeg -hide_banner -nostdin -loglevel error -y -f lavfi -i "testsrc2=size=$size:rate=25" \
        "${audio_in[@]}" -t "$secs" -c:v libx264 -preset ultrafast -pix_fmt yuv420p \
        "${audio_out[@]}" "$file"
}

# start_worker LOGNAME ARGS...: a worker in the background; its pid in WORKER_PID.
start_worker() {
    local name=$1
    shift
    "$BIN" run --output-dir "$OUT" --poll-interval 300ms "$@" >"$WORK/$name.log" 2>&1 &
    WORKER_PID=$!
    WORKER_PIDS+=("$WORKER_PID")
}

# wait_until SECONDS DESCRIPTION COMMAND...: polls COMMAND until it succeeds.
wait_until() {
    local limit=$1 what=$2 i
    shift 2
    for ((i = 0; i < limit * 10; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.1
    done
    fail "timed out after ${limit}s waiting for: $what"
}

job_field() { sql "SELECT $2 FROM hopper.job_status($1)"; }
video_field() { sql "SELECT $2 FROM transcode.videos WHERE id = '$1'"; }
encoding() { [ "$(job_field "$1" "coalesce(progress, 0) > 0")" = t ]; }
# For wait_until, which runs its command afresh each time (a "$(...)" argument is read only once).
job_is() { [ "$(job_field "$1" state)" = "$2" ]; }
video_is() { [ "$(video_field "$1" processing_status)" = "$2" ]; }
ffmpeg_running_for() { pgrep -f -- "ffmpeg .*$OUT" >/dev/null; }
no_ffmpeg() { ! ffmpeg_running_for; }

# check_media_playlist PLAYLIST HLS_TIME: every segment but the last lasts about HLS_TIME
# (keyframes are forced on the boundaries) and none is longer.
check_media_playlist() {
    local pl=$1 t=$2
    [ -f "$pl" ] || fail "no playlist $pl"
    grep -q '^#EXT-X-ENDLIST' "$pl" || fail "$pl is not a complete (VOD) playlist"
    grep -q '^#EXT-X-PLAYLIST-TYPE:VOD' "$pl" || fail "$pl is not of type VOD"
    local durs n
    durs=$(sed -n 's/^#EXTINF:\([0-9.]*\),.*/\1/p' "$pl")
    n=$(echo "$durs" | wc -l)
    [ "$n" -ge 2 ] || fail "$pl has $n segment(s), expected several with hls_time $t"
    echo "$durs" | awk -v t="$t" -v n="$n" -v pl="$pl" '
        { if ($1 > t + 0.15 || (NR < n && $1 < t - 0.15)) { printf "%s: segment %d lasts %s s, hls_time %s\n", pl, NR, $1, t; bad = 1 } }
        END { exit bad }' || fail "segment durations off in $pl"
    # Every segment named in the playlist exists next to it.
    local dir seg
    dir=$(dirname "$pl")
    for seg in $(grep -v '^#' "$pl"); do [ -s "$dir/$seg" ] || fail "missing segment $dir/$seg"; done
}

# check_duration FILE EXPECTED: ffprobe reads FILE and its duration is within 0.3 s of EXPECTED.
check_duration() {
    local d
    d=$(ffprobe -v error -show_entries format=duration -of csv=p=0 "$1") ||
        fail "ffprobe cannot read $1"
    awk -v d="$d" -v e="$2" 'BEGIN { exit !(d - e < 0.3 && e - d < 0.3) }' ||
        fail "$1 lasts $d s, expected $2 s"
}

# A published output never has staging leftovers next to it.
check_no_staging() {
    if ls -A "$OUT" 2>/dev/null | grep -q '\.partial-'; then fail "staging directory left in $OUT"; fi
}
