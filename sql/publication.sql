-- A publication of every table in the database (a CDC tool's, an upgrade by logical replication)
-- makes PostgreSQL refuse UPDATE and DELETE on any table that has no replica identity. Every table
-- of the extension has one, history partitions made later too, every operation that updates or
-- deletes still works with such a publication in place, and the extension installs under one.
\set own_db hopper_publication
\i sql/include/own_database.sql
\i sql/include/try.sql
SET hopper.notify = off;
SET client_min_messages = error;  -- the cluster's wal_level is not logical: a warning says so
CREATE PUBLICATION regress_everything FOR ALL TABLES;
RESET client_min_messages;

-- Tables of schema hopper without a usable replica identity: a primary key, an index named by
-- REPLICA IDENTITY USING INDEX, or FULL.
CREATE FUNCTION pg_temp.without_identity() RETURNS SETOF regclass LANGUAGE sql AS $$
    SELECT c.oid::regclass FROM pg_class c
    WHERE c.relnamespace = 'hopper'::regnamespace AND c.relkind IN ('r', 'p')
      AND NOT (c.relreplident = 'f'
               OR (c.relreplident = 'd' AND EXISTS (SELECT 1 FROM pg_index i
                                                    WHERE i.indrelid = c.oid AND i.indisprimary))
               OR (c.relreplident = 'i' AND EXISTS (SELECT 1 FROM pg_index i
                                                    WHERE i.indrelid = c.oid AND i.indisreplident)))
    ORDER BY 1
$$;
SELECT * FROM pg_temp.without_identity();

-- A finished job dated past the partitions made so far lands in the default partition; the
-- partitions made next move it out (a DELETE there).
INSERT INTO hopper.job_history (id, queue, state, priority, run_at, attempt, max_attempts,
                                created_at, finished_at, payload)
VALUES (-1, 'pub', 'completed', 0, now(), 1, 1, now(), now() + interval '20 days', '{}');
SELECT hopper.ensure_history_partitions(25) > 0 AS created;
SELECT tableoid::regclass = 'hopper.job_history_default'::regclass AS still_in_default
FROM hopper.job_history WHERE id = -1;
SELECT * FROM pg_temp.without_identity();
DELETE FROM hopper.job_history WHERE id = -1;

-- Rate limits: set for the queue, per key and for one key; claims spend the buckets (an UPDATE
-- per claim); removed again.
SELECT hopper.queue_create('pub') AS created;
SELECT hopper.queue_set_rate_limit('pub', 10, '1 hour') AS queue_bucket;
SELECT hopper.queue_set_rate_limit('pub', 3, '1 hour', each_key => true) AS key_default;
SELECT hopper.queue_set_rate_limit('pub', 1, '1 hour', concurrency_key => 'k1') AS one_key;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('pub', array_fill('{}'::jsonb, ARRAY[7]),
    concurrency_keys => ARRAY['k1', 'k1', 'k2', 'k2', 'k2', 'k2', NULL]);
SELECT coalesce(concurrency_key, '-') AS key, count(*) AS claimed
FROM hopper.queue_pull('pub', 10) p JOIN hopper.jobs j USING (id)
GROUP BY concurrency_key ORDER BY 1;
SELECT coalesce(concurrency_key, '-') AS key, floor(tokens) AS tokens_left, from_default
FROM hopper.rate_limits WHERE queue = 'pub' ORDER BY 1;
SELECT hopper.queue_set_rate_limit('pub', NULL, NULL, concurrency_key => 'k1') AS one_key_removed;
SELECT hopper.queue_set_rate_limit('pub', NULL, NULL, each_key => true) AS default_removed;
SELECT hopper.queue_set_rate_limit('pub', NULL, NULL) AS queue_bucket_removed;
SELECT count(*) AS buckets_left FROM hopper.rate_limits;

-- Concurrency limits set and removed; a queue paused and resumed; settings changed.
SELECT hopper.queue_set_concurrency('pub', 5, 2) AS capped;
SELECT hopper.queue_set_key_limit('pub', 'k2', 3) AS key_limit;
SELECT hopper.queue_set_key_limit('pub', 'k2', NULL) AS key_limit_removed;
SELECT hopper.queue_set_concurrency('pub', NULL, NULL) AS uncapped;
SELECT hopper.queue_pause('pub') AS paused, hopper.queue_resume('pub') AS resumed;
SELECT hopper.queue_create('pub', max_attempts => 2) AS created;

-- The running jobs: heartbeat, progress, fail, release, complete; the rest taken.
SELECT count(*) FILTER (WHERE hopper.queue_heartbeat(id, lease_token)
                          AND hopper.queue_progress(id, lease_token, 0.5)) AS kept_alive,
       count(*) FILTER (WHERE id % 3 = 0 AND hopper.queue_fail(id, lease_token, 'boom') IS NOT NULL)
           AS failed,
       count(*) FILTER (WHERE id % 3 = 1 AND hopper.queue_release(id, lease_token)) AS released,
       count(*) FILTER (WHERE id % 3 = 2 AND hopper.queue_complete(id, lease_token)) AS completed
FROM hopper.jobs WHERE queue = 'pub' AND state = 'running';
SELECT count(*) > 0 AS taken FROM hopper.queue_take('pub', 10, at => now() + interval '1 day');

-- Finished jobs taken out of history: a dead job and a cancelled one retried.
SELECT hopper.queue_push('pub', '{}') AS dead_id \gset
SELECT count(*) AS failed_for_good
FROM hopper.queue_pull('pub', 1) p WHERE hopper.queue_fail(p.id, p.lease_token, 'bad', permanent => true) = 'dead';
SELECT hopper.queue_retry(:dead_id) AS dead_retried;
SELECT hopper.queue_push('pub', '{}', run_at => now() + interval '1 hour') AS later_id \gset
SELECT hopper.queue_cancel(:later_id) AS cancelled, hopper.queue_retry(:later_id) AS cancelled_retried;
SELECT state FROM hopper.job_status(:dead_id) UNION ALL SELECT state FROM hopper.job_status(:later_id);

-- Packed rows claimed (an UPDATE of the row's front, a DELETE of an emptied row); completions in
-- a batch.
SET hopper.pack_batches = on;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('pub_packed', array_fill('{}'::jsonb, ARRAY[150]));
RESET hopper.pack_batches;
WITH p AS (SELECT id, lease_token FROM hopper.queue_pull('pub_packed', 120))
SELECT count(*) AS completed
FROM hopper.queue_complete_many((SELECT array_agg(id ORDER BY id) FROM p),
                                (SELECT array_agg(lease_token ORDER BY id) FROM p));

-- Schedules made, run, removed; deduplicated pushes.
SELECT hopper.queue_schedule('pub_tick', '*/5 * * * *', 'pub') IS NOT NULL AS scheduled;
SELECT hopper.schedule_run_due(now() + interval '1 hour') AS pushed_by_schedules;
SELECT hopper.queue_unschedule('pub_tick') AS unscheduled;
SELECT hopper.queue_push('pub', '{}', dedup_key => 'once') = hopper.queue_push('pub', '{}', dedup_key => 'once')
    AS deduplicated;

-- A queue purged, then both dropped with their jobs and history.
SELECT hopper.queue_purge('pub') > 0 AS purged;
SELECT hopper.queue_drop('pub') AS dropped, hopper.queue_drop('pub_packed') AS dropped_packed;
SELECT count(*) AS jobs_left FROM hopper.jobs;
SELECT count(*) AS history_left FROM hopper.job_history;

-- The extension installs in a database that already has such a publication: the install moves
-- rows out of the default history partition, a DELETE, which failed there without an identity.
DROP EXTENSION hopper;
CREATE EXTENSION hopper;
SELECT hopper.queue_push('pub_again', '{}') IS NOT NULL AS pushed;

DROP PUBLICATION regress_everything;
\c :regression_db
DROP DATABASE :"own_db";
