-- Claims that resume at the queue's hint read their first candidates from one leaf page of
-- jobs_pull_idx (extension/src/leaf_walk.cpp) and leave the rest to an index scan. Whatever the
-- page holds next to the queue's entries, pull order and "each job once" must hold.
SET hopper.notify = off;

-- Another queue's entries follow this one's in the index: the walk stops at them.
SELECT count(*) AS pushed FROM hopper.queue_push_batch('walk_a',
    (SELECT array_agg(jsonb_build_object('n', 'a' || i) ORDER BY i) FROM generate_series(1, 4) i));
SELECT count(*) AS pushed FROM hopper.queue_push_batch('walk_b',
    (SELECT array_agg(jsonb_build_object('n', 'b' || i) ORDER BY i) FROM generate_series(1, 4) i));
SELECT payload->>'n' AS n FROM hopper.queue_pull('walk_a', 1);
SELECT payload->>'n' AS n FROM hopper.queue_pull('walk_a', 2);
SELECT payload->>'n' AS n FROM hopper.queue_pull('walk_a', 5);
SELECT count(*) AS none_left FROM hopper.queue_pull('walk_a', 1);
SELECT payload->>'n' AS n FROM hopper.queue_pull('walk_b', 1);
SELECT payload->>'n' AS n FROM hopper.queue_pull('walk_b', 10);

-- Jobs not yet due lie between due ones in pull order: passed over, and taken when due.
SELECT hopper.queue_push('walk_due', '{"n": "now-1"}') > 0 AS pushed;
SELECT hopper.queue_push('walk_due', '{"n": "now-2"}') > 0 AS pushed;
SELECT hopper.queue_push('walk_due', '{"n": "later"}', run_at => now() + interval '1 hour') > 0
    AS pushed;
SELECT hopper.queue_push('walk_due', '{"n": "now-3"}', priority => 1) > 0 AS pushed;
SELECT hopper.queue_push('walk_due', '{"n": "now-4"}', priority => 1) > 0 AS pushed;
SELECT payload->>'n' AS n FROM hopper.queue_pull('walk_due', 1);
SELECT payload->>'n' AS n FROM hopper.queue_pull('walk_due', 2);
SELECT payload->>'n' AS n FROM hopper.queue_pull('walk_due', 2);
SELECT payload->>'n' AS n FROM hopper.queue_pull('walk_due', 1, at => now() + interval '2 hours');

-- A backlog over many leaf pages, drained 7 at a time (the walk, then the scan past each page's
-- end) and 50 at a time (the scan alone): every job once, in pull order, and every claim full
-- until the backlog runs out.
SELECT count(*) AS pushed FROM hopper.queue_push_batch('walk_long',
    (SELECT array_agg(jsonb_build_object('n', i) ORDER BY i) FROM generate_series(1, 2000) i));
SELECT pg_relation_size('hopper.jobs_pull_idx') / 8192 > 5 AS several_pages;
CREATE TEMP TABLE walk_got (k serial, call int, n int);
-- Pulls n at a time until a pull finds nothing, recording which call got which job.
CREATE FUNCTION pg_temp.drain(q text, n int) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    got int;
    calls int := 0;
BEGIN
    LOOP
        calls := calls + 1;
        INSERT INTO walk_got (call, n)
            SELECT calls, (payload->>'n')::int FROM hopper.queue_pull(q, n) ORDER BY id;
        GET DIAGNOSTICS got = ROW_COUNT;
        EXIT WHEN got = 0;
    END LOOP;
END $$;
SELECT pg_temp.drain('walk_long', 7);
SELECT count(*) AS claimed, count(DISTINCT n) AS distinct_jobs, bool_and(n = k) AS in_pull_order
FROM walk_got;
SELECT got, count(*) AS calls FROM (SELECT call, count(*) AS got FROM walk_got GROUP BY call) c
GROUP BY got ORDER BY got;
TRUNCATE walk_got;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('walk_long',
    (SELECT array_agg(jsonb_build_object('n', i) ORDER BY i) FROM generate_series(1, 600) i));
SELECT pg_temp.drain('walk_long', 50);
SELECT count(*) AS claimed, count(DISTINCT n) AS distinct_jobs,
       bool_and(n = k - 2000) AS in_pull_order, count(DISTINCT call) AS calls
FROM walk_got;

-- Several versions of one waiting job, all with its key (an operator's UPDATE of a column that
-- partial indexes test writes a new index entry each time). While they are all live, a page that
-- fills merges them into one posting-list entry: the walk reads every heap TID in it, and the job
-- is claimed once, in its place. The index is made without deduplication (its entries end in the
-- id, so only such versions could ever merge); an operator may turn it on, and the walk must
-- still read such entries.
SELECT count(*) AS pushed FROM hopper.queue_push_batch('walk_dup',
    ARRAY['{"n": "first"}', '{"n": "many-versions"}']::jsonb[]);
SELECT payload->>'n' AS n FROM hopper.queue_pull('walk_dup', 1);
BEGIN;
ALTER INDEX hopper.jobs_pull_idx SET (deduplicate_items = on);
DO $$
BEGIN
    FOR i IN 1..4 LOOP
        UPDATE hopper.jobs SET concurrency_key = CASE WHEN i % 2 = 1 THEN 'k' END
        WHERE queue = 'walk_dup' AND payload->>'n' = 'many-versions';
    END LOOP;
END $$;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('walk_dup',
    (SELECT array_agg(jsonb_build_object('n', 'after-' || i) ORDER BY i)
     FROM generate_series(1, 600) i));
-- Looked at before COMMIT: nothing can be vacuumed away while the transaction runs.
CREATE EXTENSION pageinspect;
SELECT count(*) AS posting_lists_of_5
FROM generate_series(1, pg_relation_size('hopper.jobs_pull_idx') / 8192 - 1) AS blk,
     LATERAL bt_page_stats('hopper.jobs_pull_idx', blk::int) AS s,
     LATERAL bt_page_items('hopper.jobs_pull_idx', blk::int) AS i
WHERE s.type = 'l' AND cardinality(i.tids) = 5;
DROP EXTENSION pageinspect;
ALTER INDEX hopper.jobs_pull_idx SET (deduplicate_items = off);
COMMIT;
SELECT payload->>'n' AS n FROM hopper.queue_pull('walk_dup', 1);
SELECT payload->>'n' AS n FROM hopper.queue_pull('walk_dup', 2);
SELECT count(*) AS claimed, count(DISTINCT id) AS distinct_jobs
FROM hopper.queue_pull('walk_dup', 1000);

SELECT count(*) AS dropped
FROM unnest(ARRAY['walk_a', 'walk_b', 'walk_due', 'walk_long', 'walk_dup']) AS q
WHERE hopper.queue_drop(q);
