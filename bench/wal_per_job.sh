#!/usr/bin/env bash
# WAL written per job by a drain that pulls one job at a time and completes it, for the plain-SQL
# baseline queue, hopper (history kept) and hopper on a queue with retention 0 (no history), each
# with leases (queue_complete_pull) and taking jobs in the transaction (queue_take), with
# the record types that make it up (pg_walinspect). One client, a CHECKPOINT before each drain so
# every side pays its first-touch page images alike.
#
#   bench/wal_per_job.sh [jobs]     (default 5000)
#
# Runs against the database libpq's environment names (PGHOST, PGPORT, PGDATABASE, ...), which
# must have bench/setup.sql applied; for instance:
#   eval "$(HOPPER_CLUSTER=bench test/cluster.sh env)"; PGDATABASE=bench bench/wal_per_job.sh
# It empties hopper.jobs, hopper.job_history and bench.baseline_queue.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

N=${1:-5000}
PGBENCH=${PGBENCH:-/usr/lib/postgresql/15/bin/pgbench}
q() { psql -XAtq -v ON_ERROR_STOP=1 "$@"; }

q -c "SET client_min_messages = warning" -c "CREATE EXTENSION IF NOT EXISTS pg_walinspect" >/dev/null
q -c "SELECT hopper.queue_create('wal_kept', retention => '7 days'),
             hopper.queue_create('wal_gone', retention => '0')" >/dev/null

drain() {  # label script [pgbench -D args...]
    local label=$1 script=$2 l0 l1 path
    shift 2
    # The pull size written into the baseline's LIMIT, as bench/run.sh does: bound as a parameter
    # it gets a generic plan that scans the whole queue (bench/ANALYSIS.md, section 22).
    path=$(mktemp)
    sed 's/LIMIT :n\b/LIMIT 1/' "bench/scripts/$script" >"$path"
    q -c "VACUUM ANALYZE hopper.jobs" -c "VACUUM ANALYZE bench.baseline_queue" -c "CHECKPOINT"
    l0=$(q -c "SELECT pg_catalog.pg_current_wal_insert_lsn()")
    PGOPTIONS="-c hopper.notify=off" "$PGBENCH" -n -M prepared -c 1 -t "$N" -f "$path" \
        -D id=0 -D tok=0 -D n=1 -D stop_when_empty=0 -D idle=1000 "$@" >/dev/null
    rm -f "$path"
    l1=$(q -c "SELECT pg_catalog.pg_current_wal_insert_lsn()")
    # Claims commit without waiting for the disk: a durable commit flushes the WAL past l1, which
    # pg_walinspect will only read once flushed.
    q -c "SELECT pg_catalog.txid_current()" >/dev/null
    echo
    echo "$label: $(q -c "SELECT pg_catalog.round(pg_catalog.pg_wal_lsn_diff('$l1', '$l0') / $N.0, 1)") bytes of WAL per job"
    q -F ' ' -c "SELECT pg_catalog.rpad(\"resource_manager/record_type\", 22),
            pg_catalog.to_char(count::numeric / $N, '90.00') AS per_job,
            pg_catalog.to_char(record_size::numeric / $N, '9990.0') AS bytes,
            pg_catalog.to_char(fpi_size::numeric / $N, '9990.0') AS page_images
        FROM pg_get_wal_stats('$l0', '$l1', true)
        WHERE count > 0 AND (record_size + fpi_size) >= $N
        ORDER BY record_size + fpi_size DESC" | sed 's/^/  /'
    q -c "SELECT 'left: ' || (SELECT pg_catalog.count(*) FROM hopper.jobs)
                 || ' hopper, ' || (SELECT pg_catalog.count(*) FROM bench.baseline_queue) || ' baseline'"
}

q -c "TRUNCATE hopper.jobs, hopper.job_history, bench.baseline_queue"
q -c "INSERT INTO bench.baseline_queue (message)
      SELECT pg_catalog.jsonb_build_object('n', g) FROM pg_catalog.generate_series(1, $N) g" >/dev/null
push() {  # queue: N jobs
    PGOPTIONS="-c hopper.notify=off" q -c "SELECT pg_catalog.count(*) FROM hopper.queue_push_batch('$1',
        ARRAY(SELECT pg_catalog.jsonb_build_object('n', g) FROM pg_catalog.generate_series(1, $N) g))" >/dev/null
}
push wal_kept
push wal_gone
echo "per job: records of each type, their bytes, and the bytes of full-page images among them"
drain "baseline (UPDATE .. SKIP LOCKED, then DELETE)" base_pull_complete.sql
drain "hopper, history kept (queue_complete_pull)" hop_complete_pull.sql -D q=wal_kept
drain "hopper, retention 0 (queue_complete_pull)" hop_complete_pull.sql -D q=wal_gone
push wal_kept
push wal_gone
drain "hopper, history kept (queue_take)" hop_take.sql -D q=wal_kept
drain "hopper, retention 0 (queue_take)" hop_take.sql -D q=wal_gone
q -c "SELECT hopper.queue_drop('wal_kept'), hopper.queue_drop('wal_gone')" >/dev/null
