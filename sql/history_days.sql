-- queue_stats and queue_jobs of one queue read the days of history its retention keeps, not
-- every day that a longer retention of another queue keeps: the partitions of the days before
-- are left out of the plan (neither opened nor read), and the rows there that the reaper has yet
-- to prune are no longer counted or listed. queue_stats of every queue counts each queue's
-- history the same way.
--
-- In a database of its own: the test makes a history partition of a past day.
\set own_db hopper_history_days
\i sql/include/own_database.sql
SET hopper.notify = off;
SELECT hopper.queue_create('days_long', retention => '1 year') AS created;
SELECT hopper.queue_create('days_short', retention => '2 days') AS created;
-- A day ten days back, kept by the retention of days_long, with a job of each queue finished
-- then; the one of days_short is past its retention.
SELECT 'hopper.job_history_p' || pg_catalog.to_char(d, 'YYYYMMDD') AS old_day,
       pg_catalog.to_char(d, 'YYYY-MM-DD') AS low, pg_catalog.to_char(d + 1, 'YYYY-MM-DD') AS high
FROM (SELECT (pg_catalog.now() AT TIME ZONE 'UTC')::date - 10 AS d) x \gset
CREATE TABLE :old_day PARTITION OF hopper.job_history
    FOR VALUES FROM (:'low') TO (:'high');
INSERT INTO hopper.job_history (id, queue, state, priority, run_at, attempt, max_attempts,
                                created_at, finished_at, payload)
VALUES (-1, 'days_long', 'completed', 0, :'low', 1, 5, :'low', (:'low' || ' 12:00+00')::timestamptz, '{}'),
       (-2, 'days_short', 'completed', 0, :'low', 1, 5, :'low', (:'low' || ' 12:00+00')::timestamptz, '{}');
-- And a job of days_short finished now.
SELECT hopper.queue_push('days_short', '{}') AS fresh \gset
SELECT hopper.queue_complete(id, lease_token) AS completed FROM hopper.queue_pull('days_short', 1);

-- The scans of the old day's partition by one call each (xact counts are the session's own).
CREATE FUNCTION pg_temp.scans(part regclass) RETURNS bigint LANGUAGE sql AS $$
    SELECT seq_scan + COALESCE(idx_scan, 0) FROM pg_catalog.pg_stat_xact_user_tables
    WHERE relid = part
$$;
-- queue_jobs makes a plan for each call, with the bound: the old day is not even locked.
BEGIN;
SELECT pg_temp.scans(:'old_day') AS before \gset
SELECT id = :fresh AS fresh, state FROM hopper.queue_jobs('days_short');
SELECT id = :fresh AS fresh, state FROM hopper.queue_jobs('days_short', 'completed', lim => 5);
SELECT pg_temp.scans(:'old_day') - :before AS old_day_scans;
SELECT count(*) AS old_day_locks FROM pg_catalog.pg_locks
WHERE pid = pg_catalog.pg_backend_pid() AND relation = :'old_day'::regclass;
COMMIT;
-- queue_stats' plan is generic: the executor leaves the old day out when it starts.
BEGIN;
SELECT pg_temp.scans(:'old_day') AS before \gset
SELECT completed, dead, cancelled FROM hopper.queue_stats('days_short');
SELECT pg_temp.scans(:'old_day') - :before AS old_day_scans;
COMMIT;
-- The queue that keeps the old day reads it.
BEGIN;
SELECT pg_temp.scans(:'old_day') AS before \gset
SELECT completed FROM hopper.queue_stats('days_long');
SELECT id FROM hopper.queue_jobs('days_long');
SELECT pg_temp.scans(:'old_day') - :before >= 2 AS old_day_read;
COMMIT;
-- A generic plan of queue_jobs (plan_cache_mode, which its own setting gives way to) leaves it
-- out when it starts.
SET plan_cache_mode = force_generic_plan;
BEGIN;
SELECT pg_temp.scans(:'old_day') AS before \gset
SELECT id = :fresh AS fresh FROM hopper.queue_jobs('days_short', 'completed');
SELECT pg_temp.scans(:'old_day') - :before AS old_day_scans;
COMMIT;
RESET plan_cache_mode;
-- Every queue: the same counts.
SELECT queue, completed FROM hopper.queue_stats() ORDER BY queue;

\c :regression_db
DROP DATABASE :own_db;
