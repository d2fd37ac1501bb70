#!/usr/bin/env bash
# What the days kept in hopper.job_history cost the reads of history: job_status and queue_cancel
# (of a finished job) by id, queue_jobs(lim => 5) and queue_stats of one queue and queue_stats of
# every queue, each timed with pgbench (one client, SECS seconds, 4 by default), with DAYS past
# daily partitions kept by a queue of long retention that finished one job a day, beside a queue
# of the default retention (7 days) with 1,000 jobs finished today, which is read.
#
#   bench/history_days.sh            DAYS=359 (the partitions a retention of '1 year' keeps)
#   DAYS=0 bench/history_days.sh     only the partitions a fresh install has
#
# Runs on the cluster of test/cluster.sh (HOPPER_CLUSTER picks it), in a database of its own
# (history_days), which it makes afresh. Prints the number of history partitions and the average
# latency of each read (queue_stats_all: queue_stats() of every queue).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
DAYS=${DAYS:-359}
SECS=${SECS:-4}
eval "$(test/cluster.sh env)"
export PGHOST PGPORT PGUSER
bindir=$(test/cluster.sh bindir)
db=history_days

psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db"
psql -X -q -v ON_ERROR_STOP=1 -d $db <<SQL
SET client_min_messages = warning;
CREATE EXTENSION hopper;
SET hopper.notify = off;
SELECT hopper.queue_create('yearly', retention => '1 year');
DO \$\$
DECLARE d date;
BEGIN
    FOR i IN 1 .. $DAYS LOOP
        d := (now() AT TIME ZONE 'UTC')::date - i;
        EXECUTE format('CREATE TABLE hopper.%I PARTITION OF hopper.job_history '
            'FOR VALUES FROM (%L) TO (%L)', 'job_history_p' || to_char(d, 'YYYYMMDD'),
            d::text || ' 00:00:00+00', (d + 1)::text || ' 00:00:00+00');
        INSERT INTO hopper.job_history (id, queue, state, priority, run_at, attempt,
            max_attempts, created_at, finished_at, payload)
        VALUES (-i, 'yearly', 'completed', 0, d + time '12:00', 1, 5, d + time '12:00',
            (d::text || ' 12:00:00+00')::timestamptz, '{}');
    END LOOP;
END \$\$;
SELECT hopper.queue_create('reads');
SELECT count(*) FROM hopper.queue_push_batch('reads',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 1000) g)) \g /dev/null
WITH p AS (SELECT id, lease_token FROM hopper.queue_pull('reads', 1000))
SELECT count(*) FROM hopper.queue_complete_many((SELECT array_agg(id ORDER BY id) FROM p),
    (SELECT array_agg(lease_token ORDER BY id) FROM p)) \g /dev/null
VACUUM ANALYZE hopper.job_history;
SQL

id=$(psql -X -Atq -d $db -c "SELECT max(id) FROM hopper.job_history WHERE queue = 'reads'")
parts=$(psql -X -Atq -d $db -c "SELECT count(*) FROM pg_inherits WHERE inhparent = 'hopper.job_history'::regclass")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "SELECT * FROM hopper.job_status($id);" >"$tmp/job_status.sql"
echo "SELECT * FROM hopper.queue_jobs('reads', lim => 5);" >"$tmp/queue_jobs.sql"
echo "SELECT * FROM hopper.queue_stats('reads');" >"$tmp/queue_stats.sql"
echo "SELECT * FROM hopper.queue_stats();" >"$tmp/queue_stats_all.sql"
echo "SELECT hopper.queue_cancel($id);" >"$tmp/queue_cancel.sql"
echo "history partitions: $parts (DAYS=$DAYS)"
for read in job_status queue_cancel queue_jobs queue_stats queue_stats_all; do
    ms=$("$bindir/pgbench" -n -M prepared -c 1 -T "$SECS" -f "$tmp/$read.sql" $db 2>/dev/null |
        sed -n 's/^latency average = \([0-9.]*\) ms$/\1/p')
    echo "$read: $ms ms"
done
