#!/usr/bin/env bash
# The project's own throwaway PostgreSQL 15 cluster, shared by `make test`, `make demo` and `make bench`.
#
# It runs from a private copy of the server ("the stage", under $HOPPER_RUN_DIR/pg) into which the
# extension is installed with DESTDIR, so tests never touch the system PostgreSQL and need no root to
# install. PostgreSQL finds its share/ and lib/ relative to its own binary, which is what makes a copied
# tree work. When run as root the cluster runs as the `postgres` user (initdb refuses root).
#
#   cluster.sh stage            copy the server into the stage (once)
#   cluster.sh start [--preload] initdb if needed, start; --preload adds shared_preload_libraries=hopper
#   cluster.sh stop | restart [--preload] | status | destroy
#   cluster.sh env              print PGHOST/PGPORT/PGUSER/PGDATABASE exports for eval
#   cluster.sh psql [args]      psql into the cluster
#   cluster.sh bindir | stagedir | datadir | logfile | port | rundir | instancedir
#
# HOPPER_CLUSTER picks the instance (default demo), HOPPER_RUN_DIR the base directory.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pg_config_sys=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}

run_as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

default_run_dir() {
  local d="$repo/.hopper"
  if [ "$(id -u)" -eq 0 ]; then
    # The postgres user must be able to reach the data directory; a checkout under /root is not.
    mkdir -p "$d"
    if ! runuser -u postgres -- test -x "$d" 2>/dev/null; then
      d="/var/tmp/hopper-$(printf '%s' "$repo" | cksum | cut -d' ' -f1)"
    fi
  fi
  echo "$d"
}

RUN_DIR=${HOPPER_RUN_DIR:-$(default_run_dir)}
mkdir -p "$RUN_DIR"
RUN_DIR=$(cd "$RUN_DIR" && pwd)
STAGE="$RUN_DIR/pg"
SYS_BINDIR=$("$pg_config_sys" --bindir)
SYS_SHAREDIR=$("$pg_config_sys" --sharedir)
BINDIR="$STAGE$SYS_BINDIR"
# Several clusters share one stage: HOPPER_CLUSTER names one (demo by default; make test uses "test",
# make bench "bench"), so running the tests never wipes the demo's data.
INSTANCE=${HOPPER_CLUSTER:-demo}
DATA="$RUN_DIR/$INSTANCE/data"
SOCK="$RUN_DIR/$INSTANCE/sock"
LOG="$RUN_DIR/$INSTANCE/postgres.log"
# A port derived from the run directory lets several checkouts run clusters side by side.
PORT=${HOPPER_PGPORT:-$((54000 + $(printf '%s' "$RUN_DIR/$INSTANCE" | cksum | cut -d' ' -f1) % 1000))}

stage() {
  if [ ! -x "$BINDIR/postgres" ]; then
    local libroot
    libroot=$(dirname "$SYS_BINDIR")          # /usr/lib/postgresql/15
    mkdir -p "$STAGE$(dirname "$libroot")" "$STAGE$(dirname "$SYS_SHAREDIR")"
    cp -a "$libroot" "$STAGE$(dirname "$libroot")/"
    cp -a "$SYS_SHAREDIR" "$STAGE$(dirname "$SYS_SHAREDIR")/"
  fi
  chmod a+rx "$RUN_DIR"
  chmod -R a+rX "$STAGE"
}

is_running() {
  [ -f "$DATA/postmaster.pid" ] && run_as_pg "$BINDIR/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

init_cluster() {
  [ -f "$DATA/PG_VERSION" ] && return 0
  mkdir -p "$DATA" "$SOCK"
  chmod 700 "$DATA"
  if [ "$(id -u)" -eq 0 ]; then chown postgres: "$DATA" "$SOCK" "$RUN_DIR/$INSTANCE"; fi
  run_as_pg "$BINDIR/initdb" -D "$DATA" -U postgres --auth=trust --encoding=UTF8 --locale=C >"$RUN_DIR/initdb.log" 2>&1 ||
    { cat "$RUN_DIR/initdb.log" >&2; exit 1; }
  cat >>"$DATA/postgresql.conf" <<CONF

# --- hopper local cluster ---
listen_addresses = '127.0.0.1'
port = $PORT
unix_socket_directories = '$SOCK'
max_connections = 200
max_worker_processes = 32
shared_buffers = 256MB
max_wal_size = 4GB
checkpoint_timeout = 30min
log_min_messages = warning
log_line_prefix = '%m [%p] %d '
CONF
  if [ -f "$repo/test/cluster.conf" ]; then cat "$repo/test/cluster.conf" >>"$DATA/postgresql.conf"; fi
}

start() {
  local preload=0
  for a in "$@"; do [ "$a" = --preload ] && preload=1; done
  stage
  init_cluster
  if is_running; then
    local want have
    want=$preload
    have=$(grep -c "^shared_preload_libraries = 'hopper'" "$DATA/postgresql.auto.conf" 2>/dev/null || true)
    [ "$want" = "${have:-0}" ] && return 0
    run_as_pg "$BINDIR/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
  fi
  sed -i "/^shared_preload_libraries/d" "$DATA/postgresql.auto.conf"
  if [ "$preload" = 1 ]; then echo "shared_preload_libraries = 'hopper'" >>"$DATA/postgresql.auto.conf"; fi
  run_as_pg "$BINDIR/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >/dev/null ||
    { tail -n 30 "$LOG" >&2; exit 1; }
}

stop() {
  if is_running; then run_as_pg "$BINDIR/pg_ctl" -D "$DATA" -m fast -w -t 60 stop >/dev/null; fi
}

cmd=${1:-status}
shift || true
case "$cmd" in
  stage) stage ;;
  start) start "$@" ;;
  stop) stop ;;
  restart) stop; start "$@" ;;
  status) if is_running; then echo "running: $DATA (port $PORT, socket $SOCK)"; else echo "stopped"; exit 3; fi ;;
  destroy) stop; rm -rf "$DATA" "$SOCK" "$LOG" ;;
  env) printf 'export PGHOST=%q PGPORT=%q PGUSER=postgres PGDATABASE=%q\n' "$SOCK" "$PORT" "${PGDATABASE:-postgres}" ;;
  psql) exec psql -h "$SOCK" -p "$PORT" -U postgres -X "$@" ;;
  bindir) echo "$BINDIR" ;;
  stagedir) echo "$STAGE" ;;
  datadir) echo "$DATA" ;;
  rundir) echo "$RUN_DIR" ;;
  instancedir) echo "$RUN_DIR/$INSTANCE" ;;
  logfile) echo "$LOG" ;;
  port) echo "$PORT" ;;
  *) echo "usage: $0 stage|start [--preload]|stop|restart|status|destroy|env|psql|bindir|stagedir|datadir|logfile|port" >&2; exit 2 ;;
esac
