#!/usr/bin/env bash
# hopper against pg-boss and Graphile Worker (`make bench-peers`): a fresh cluster of the project's
# (test/cluster.sh, HOPPER_CLUSTER=peers, the settings `make bench` uses), hopper installed, the
# peers' pinned npm packages (bench/peers/package-lock.json), then bench/peers/run.js. Writes
# bench/results/PEERS.md.
#
# Settings (environment): PEERS_SECONDS, PEERS_REPS, PEERS_ONLY (see bench/peers/run.js).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
log() { printf '[peers %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
# shellcheck source=bench/fresh_cluster.sh
. bench/fresh_cluster.sh

# pg-boss 10 and Graphile Worker 0.17 need Node.js 20 or later.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    log "installing Node.js and npm"
    apt-get install -y -q nodejs npm >/dev/null
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
    echo "bench/peers.sh: Node.js $(node --version) is too old; pg-boss 10 needs 20 or later" >&2
    exit 1
fi
log "npm packages (bench/peers/package-lock.json)"
npm ci --prefix bench/peers --no-audit --no-fund --loglevel=error >/dev/null

export HOPPER_CLUSTER=peers
cluster=test/cluster.sh
trap '$cluster stop >/dev/null 2>&1 || true' EXIT
log "fresh cluster"
fresh_cluster peers

mkdir -p bench/results
PEERS_OUT=bench/results/PEERS.md node bench/peers/run.js
