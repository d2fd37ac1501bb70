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

-- Packed rows (hopper.pack_batches): a listing reads the queue's newest rows through
-- job_batches_list_idx, not every row of its backlog (every packed job of the queue unnested and
-- sorted took 240-440 ms for 3 jobs of a backlog of 500,000); "scheduled" reads none, packed jobs
-- being due at their push.
SET hopper.pack_batches = on;
SELECT count(*) AS pushed
FROM hopper.queue_push_batch('listing_packed',
    ARRAY(SELECT pg_catalog.jsonb_build_object('n', g) FROM generate_series(1, 5000) g));
RESET hopper.pack_batches;
SELECT count(*) AS packed_rows FROM hopper.job_batches WHERE queue = 'listing_packed';
CREATE FUNCTION pg_temp.packed_rows_read() RETURNS bigint LANGUAGE sql AS $$
    SELECT sum(pg_stat_get_xact_tuples_returned(oid) + pg_stat_get_xact_tuples_fetched(oid))
    FROM (SELECT 'hopper.job_batches'::regclass::oid
          UNION ALL
          SELECT indexrelid FROM pg_index WHERE indrelid = 'hopper.job_batches'::regclass) r(oid)
$$;
CREATE FUNCTION pg_temp.packed_listing_reads(state text, lim integer)
RETURNS TABLE (listed bigint, newest bigint, rows_read bigint) LANGUAGE plpgsql AS $$
DECLARE
    before bigint := pg_temp.packed_rows_read();
BEGIN
    SELECT count(*), max((payload ->> 'n')::bigint) INTO listed, newest
    FROM hopper.queue_jobs('listing_packed', state, lim);
    rows_read := pg_temp.packed_rows_read() - before;
    RETURN NEXT;
END $$;
SELECT coalesce(s, 'all') AS state, n AS lim, listed, newest, rows_read < 10 AS few_rows_read
FROM unnest(ARRAY[NULL, 'available', 'scheduled']) s, unnest(ARRAY[1, 5, 100]) n,
     pg_temp.packed_listing_reads(s, n);
SELECT hopper.queue_drop('listing_packed') AS dropped;

-- The listing is exact whatever the rows' ids: rows of batches pushed at the same time interleave
-- theirs, rows are partly taken, and one row may span all the others. Rows written by hand, each
-- listing compared with every waiting job of the queue sorted (what the listing read before),
-- with limits that end the walk in each row.
SELECT hopper.queue_create('listing_mixed') AS created;
CREATE TEMP TABLE drawn AS
SELECT array_agg(v ORDER BY v) AS a
FROM (SELECT pg_catalog.nextval('hopper.job_id_seq') AS v FROM generate_series(1, 600)) s;
INSERT INTO hopper.job_batches (first_id, last_id, queue, priority, run_at, created_at, kind,
                                max_attempts, taken, ids, payloads)
SELECT r.ids[1], r.ids[cardinality(r.ids)], 'listing_mixed', 0,
       CASE WHEN r.kind = 'later' THEN now() + interval '1 hour' ELSE now() END, now(), r.kind, 5,
       r.taken, r.ids,
       ARRAY(SELECT pg_catalog.jsonb_build_object('rel', i - d.a[1]) FROM unnest(r.ids) i)
FROM drawn d, LATERAL (VALUES
    (ARRAY(SELECT d.a[g] FROM generate_series(1, 199, 2) g), 0, 'odd'),
    (ARRAY(SELECT d.a[g] FROM generate_series(2, 200, 2) g), 30, 'even'),
    (d.a[201:300], 0, 'plain'),
    (d.a[301:349] || d.a[600], 0, 'wide'),
    (d.a[350:449], 99, 'one_left'),
    (d.a[450:549], 0, 'tail'),
    (d.a[550:599], 0, 'later')) r(ids, taken, kind);
CREATE FUNCTION pg_temp.listed(s text, n integer) RETURNS text[] LANGUAGE sql AS $$
    SELECT ARRAY(SELECT concat_ws(' ', id, state, kind, attempt, max_attempts, payload)
                 FROM hopper.queue_jobs('listing_mixed', s, n))
$$;
CREATE FUNCTION pg_temp.all_sorted(s text, n integer) RETURNS text[] LANGUAGE sql AS $$
    SELECT ARRAY(SELECT concat_ws(' ', u.id, x.state, b.kind, 0, b.max_attempts, u.payload)
                 FROM hopper.job_batches b,
                      ROWS FROM (unnest(b.ids[b.taken + 1 :]), unnest(b.payloads[b.taken + 1 :]))
                        u(id, payload),
                      LATERAL (SELECT CASE WHEN b.run_at > clock_timestamp() THEN 'scheduled'
                                      ELSE 'available' END) x(state)
                 WHERE b.queue = 'listing_mixed' AND (s IS NULL OR x.state = s)
                 ORDER BY u.id DESC LIMIT n)
$$;
SELECT v.rel AS rel_id, v.state, v.kind, v.payload
FROM (SELECT j.id - d.a[1] AS rel, j.state, j.kind, j.payload
      FROM drawn d, hopper.queue_jobs('listing_mixed', lim => 4) j) v;
SELECT coalesce(s, 'all') AS state, count(*) AS listings,
       count(*) FILTER (WHERE pg_temp.listed(s, n) = pg_temp.all_sorted(s, n)) AS as_sorted,
       max(cardinality(pg_temp.listed(s, n))) AS most_listed
FROM unnest(ARRAY[NULL, 'available']) s,
     unnest(ARRAY[1, 2, 3, 5, 49, 50, 51, 70, 71, 100, 101, 150, 199, 200, 252, 300, 302, 321,
                  350, 371, 372, 420, 421, 500]) n
GROUP BY s ORDER BY s NULLS FIRST;
-- "scheduled" reads no packed row: pushes pack due batches only, and a packed row due later, as
-- the one written by hand here, is listed as scheduled only among all states.
SELECT count(*) AS scheduled FROM hopper.queue_jobs('listing_mixed', 'scheduled');
SELECT hopper.queue_drop('listing_mixed') AS dropped;

-- A job whose run_at was written by hand as -infinity: queue_stats still answers (the age of the
-- oldest available job cannot be infinite in an interval; the earliest timestamp stands in).
SELECT hopper.queue_push('listing-far', '{}') AS far \gset
UPDATE hopper.jobs SET run_at = '-infinity' WHERE id = :far;
SELECT available, oldest_available_age > interval '6000 years' AS ancient
FROM hopper.queue_stats('listing-far');
SELECT hopper.queue_drop('listing-far') AS dropped;
