-- queue_jobs: the jobs of one queue, live and finished, optionally in one state, newest first.
SET hopper.notify = off;

SELECT hopper.queue_create('listing') AS created;
SELECT hopper.queue_create('listing_other') AS created;
SELECT hopper.queue_push('listing', '{"n": 1}', kind => 'a') AS j1 \gset
SELECT hopper.queue_push('listing', '{"n": 2}', kind => 'b') AS j2 \gset
SELECT hopper.queue_push('listing', '{"n": 3}', run_at => now() + interval '1 hour') AS j3 \gset
SELECT hopper.queue_push('listing', '{"n": 4}') AS j4 \gset
SELECT hopper.queue_push('listing_other', '{"n": 5}') AS j5 \gset

-- Nothing pulled yet: three available, one scheduled, other queues never show.
SELECT id - :j1 AS rel_id, queue, kind, state, payload FROM hopper.queue_jobs('listing');

-- Pull j1, complete it; pull j2, fail it permanently; cancel j4.
SELECT lease_token AS t1 FROM hopper.queue_pull('listing', 1) \gset
SELECT hopper.queue_complete(:j1, :t1, '{"ok": true}') AS completed;
SELECT lease_token AS t2 FROM hopper.queue_pull('listing', 1) \gset
SELECT hopper.queue_fail(:j2, :t2, 'broken', permanent => true) AS failed;
SELECT hopper.queue_cancel(:j4) AS cancelled;

SELECT id - :j1 AS rel_id, state, attempt, result, last_error, finished_at IS NOT NULL AS finished
FROM hopper.queue_jobs('listing');
SELECT id - :j1 AS rel_id, state FROM hopper.queue_jobs('listing', 'dead');
SELECT id - :j1 AS rel_id, state FROM hopper.queue_jobs('listing', 'scheduled');
SELECT id - :j1 AS rel_id, state FROM hopper.queue_jobs('listing', 'completed');
SELECT count(*) AS running FROM hopper.queue_jobs('listing', 'running');
SELECT hopper.queue_push('listing', '{"n": 6}') AS j6 \gset
SELECT id - :j1 AS pulled FROM hopper.queue_pull('listing', 1);
SELECT id - :j1 AS rel_id, state, attempt FROM hopper.queue_jobs('listing', 'running');
-- The limit keeps the newest.
SELECT id - :j1 AS rel_id FROM hopper.queue_jobs('listing', lim => 2);

-- Errors name the argument.
SELECT * FROM hopper.queue_jobs('no_such_queue');
SELECT * FROM hopper.queue_jobs('listing', 'finished');
SELECT * FROM hopper.queue_jobs('listing', '');
SELECT * FROM hopper.queue_jobs('listing', lim => 0);
SELECT * FROM hopper.queue_jobs('listing', lim => 10001);
SELECT * FROM hopper.queue_jobs('listing', lim => NULL);
SELECT * FROM hopper.queue_jobs(NULL);
SELECT * FROM hopper.queue_jobs('bad name!');

-- A long history costs what the listing returns: the newest jobs of a queue come from indexes
-- in id order, not from sorting everything the queue ever finished. Rows read from hopper.jobs
-- and the history's partitions by one listing, counted in this transaction's statistics.
SELECT count(*) AS pushed
FROM hopper.queue_push_batch('listing_long', array_fill('{}'::jsonb, ARRAY[3000]));
SELECT sum(n) AS finished
FROM generate_series(1, 3) i, LATERAL (SELECT count(*) AS n FROM hopper.queue_take('listing_long', 1000 + 0 * i)) t;
-- Scheduled jobs older than the waiting ones: listing them does not walk the waiting jobs.
SELECT count(*) AS scheduled
FROM hopper.queue_push_batch('listing_long', array_fill('{}'::jsonb, ARRAY[5]),
                             run_at => now() + interval '1 hour');
SELECT count(*) AS pushed
FROM hopper.queue_push_batch('listing_long', array_fill('{}'::jsonb, ARRAY[3000]));
SELECT count(*) AS running FROM hopper.queue_pull('listing_long', 2);
ANALYZE hopper.jobs, hopper.job_history;
-- Rows a scan returned from the tables, and entries read from their indexes and the rows
-- fetched through them (an index scan counts on the index, not on the table).
CREATE FUNCTION pg_temp.rows_read() RETURNS bigint LANGUAGE sql AS $$
    WITH t(oid) AS (SELECT 'hopper.jobs'::regclass::oid
                    UNION ALL
                    SELECT inhrelid FROM pg_inherits WHERE inhparent = 'hopper.job_history'::regclass),
         r(oid) AS (SELECT oid FROM t
                    UNION ALL
                    SELECT indexrelid FROM pg_index WHERE indrelid IN (SELECT oid FROM t))
    SELECT sum(pg_stat_get_xact_tuples_returned(oid) + pg_stat_get_xact_tuples_fetched(oid)) FROM r
$$;
CREATE FUNCTION pg_temp.listing_reads(state text) RETURNS TABLE (listed bigint, rows_read bigint)
LANGUAGE plpgsql AS $$
DECLARE
    before bigint := pg_temp.rows_read();
BEGIN
    SELECT count(*) INTO listed FROM hopper.queue_jobs('listing_long', state, 5);
    rows_read := pg_temp.rows_read() - before;
    RETURN NEXT;
END $$;
SELECT coalesce(s, 'all') AS state, listed, rows_read < 100 AS few_rows_read
FROM unnest(ARRAY[NULL, 'completed', 'dead', 'available', 'running', 'scheduled']) s, pg_temp.listing_reads(s);

SELECT hopper.queue_drop('listing') AS dropped;
SELECT hopper.queue_drop('listing_other') AS dropped;
SELECT hopper.queue_drop('listing_long') AS dropped;

-- A job whose run_at was written by hand as -infinity: queue_stats still answers (the age of the
-- oldest available job cannot be infinite in an interval; the earliest timestamp stands in).
SELECT hopper.queue_push('listing-far', '{}') AS far \gset
UPDATE hopper.jobs SET run_at = '-infinity' WHERE id = :far;
SELECT available, oldest_available_age > interval '6000 years' AS ancient
FROM hopper.queue_stats('listing-far');
SELECT hopper.queue_drop('listing-far') AS dropped;
