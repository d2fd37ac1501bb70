-- Batched completion: queue_complete_many and queue_complete_pull.
SET hopper.notify = off;

SELECT hopper.queue_create('bulk_done') AS created;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('bulk_done',
    ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}', '{"n": 4}']::jsonb[]);

-- Pull three, complete them in one call with per-job results.
CREATE TEMP TABLE held AS SELECT id, lease_token, payload FROM hopper.queue_pull('bulk_done', 3);
SELECT count(*) AS held FROM held;
SELECT count(*) AS completed
FROM hopper.queue_complete_many((SELECT array_agg(id ORDER BY id) FROM held),
                                (SELECT array_agg(lease_token ORDER BY id) FROM held),
                                (SELECT array_agg(pg_catalog.jsonb_build_object('done', payload->'n'))
                                 FROM (SELECT payload FROM held ORDER BY id) s));
SELECT s.state, s.result = pg_catalog.jsonb_build_object('done', h.payload->'n') AS result_kept
FROM held h, hopper.job_status(h.id) s ORDER BY h.id;

-- The same ids again: the leases are gone, so nothing is completed (not an error).
SELECT count(*) AS completed_again
FROM hopper.queue_complete_many((SELECT array_agg(id) FROM held),
                                (SELECT array_agg(lease_token) FROM held));

-- Fencing: of a stale and a current token, only the current one completes; ids come back in the
-- order given, duplicates once.
SELECT hopper.queue_push('bulk_done', '{"n": 5}') AS id5 \gset
SELECT id AS a, lease_token AS ta FROM hopper.queue_pull('bulk_done', 1) \gset
SELECT id AS b, lease_token AS tb FROM hopper.queue_pull('bulk_done', 1) \gset
SELECT (ids.id = :b) AS is_b
FROM hopper.queue_complete_many(ARRAY[:b, :a, :b], ARRAY[:tb, :ta + 1000, :tb]) AS ids(id);
SELECT state FROM hopper.job_status(:a);
SELECT hopper.queue_complete(:a, :ta) AS a_completed;

-- Empty arrays complete nothing.
SELECT count(*) AS none FROM hopper.queue_complete_many('{}', '{}');

-- Bad input: real SQLSTATEs, nothing changed.
\set VERBOSITY sqlstate
SELECT hopper.queue_complete_many(NULL, '{1}');
SELECT hopper.queue_complete_many('{1}', NULL);
SELECT hopper.queue_complete_many('{1,2}', '{1}');
SELECT hopper.queue_complete_many('{1}', '{1}', '{}');
SELECT hopper.queue_complete_many(ARRAY[1, NULL]::bigint[], '{1,2}');
SELECT hopper.queue_complete_many('{{1}}', '{{1}}');
SELECT hopper.queue_complete_many(ARRAY[999999999]::bigint[], ARRAY[1]::bigint[]);
SELECT count(*) FROM hopper.queue_complete_many(
    (SELECT array_agg(g) FROM generate_series(1, 10001) g),
    (SELECT array_agg(g) FROM generate_series(1, 10001) g));
\set VERBOSITY default
SELECT hopper.queue_complete_many('{1,2}', '{1}');

-- queue_complete_pull: only pull, then complete the held job and pull the next in one call.
SELECT hopper.queue_push('bulk_done', '{"n": 6}') AS id6 \gset
SELECT hopper.queue_push('bulk_done', '{"n": 7}') AS id7 \gset
SELECT hopper.queue_push('bulk_done', '{"n": 8}') AS id8 \gset
SELECT id AS c, lease_token AS tc, attempt FROM hopper.queue_complete_pull(NULL, NULL, NULL, 'bulk_done')
\gset
SELECT :c = :id6 AS first_in_order, :attempt AS attempt;
SELECT id AS d, lease_token AS td FROM hopper.queue_complete_pull(:c, :tc, '{"ok": 1}', 'bulk_done',
                                                                 worker => 'w9') \gset
SELECT :d = :id7 AS next_in_order;
SELECT state, result FROM hopper.job_status(:c);
SELECT state, worker FROM hopper.job_status(:d);
-- A stale token completes nothing, but the worker still gets its next job.
SELECT id = :id8 AS got_next FROM hopper.queue_complete_pull(:d, :td + 1000, NULL, 'bulk_done', 5);
SELECT state FROM hopper.job_status(:d);
-- An empty queue: the completion happens, nothing is pulled.
SELECT count(*) AS pulled FROM hopper.queue_complete_pull(:d, :td, NULL, 'bulk_done');
SELECT state FROM hopper.job_status(:d);

\set VERBOSITY sqlstate
SELECT * FROM hopper.queue_complete_pull(1, NULL, NULL, 'bulk_done');
SELECT * FROM hopper.queue_complete_pull(NULL, 1, NULL, 'bulk_done');
SELECT * FROM hopper.queue_complete_pull(NULL, NULL, NULL, 'bad queue');
SELECT * FROM hopper.queue_complete_pull(NULL, NULL, NULL, NULL);
SELECT * FROM hopper.queue_complete_pull(999999999, 1, NULL, 'bulk_done');
SELECT * FROM hopper.queue_complete_pull(NULL, NULL, NULL, 'bulk_done', 0);
\set VERBOSITY default
SELECT * FROM hopper.queue_complete_pull(1, NULL, NULL, 'bulk_done');

-- queue_complete_many_pull: only pull (empty arrays), then complete the held batch and pull the
-- next in one call.
SELECT count(*) AS pushed FROM hopper.queue_push_batch('bulk_done',
    ARRAY['{"n": 9}', '{"n": 10}', '{"n": 11}', '{"n": 12}', '{"n": 13}']::jsonb[]);
CREATE TEMP TABLE batch1 AS
    SELECT id, lease_token, payload FROM hopper.queue_complete_many_pull('{}', '{}', NULL, 'bulk_done', 2);
SELECT string_agg(payload->>'n', ',' ORDER BY id) AS first_batch FROM batch1;
CREATE TEMP TABLE batch2 AS
    SELECT id, lease_token, payload FROM hopper.queue_complete_many_pull(
        (SELECT array_agg(id ORDER BY id) FROM batch1),
        (SELECT array_agg(lease_token ORDER BY id) FROM batch1),
        ARRAY['{"r": 9}', NULL]::jsonb[], 'bulk_done', 2, worker => 'w10');
SELECT string_agg(payload->>'n', ',' ORDER BY id) AS second_batch FROM batch2;
SELECT b.payload->>'n' AS n, s.state, s.result FROM batch1 b, hopper.job_status(b.id) s ORDER BY b.id;
SELECT DISTINCT s.state, s.worker FROM batch2 b, hopper.job_status(b.id) s;
-- Stale tokens complete nothing, but the worker still gets its next job.
SELECT payload->>'n' AS next FROM hopper.queue_complete_many_pull(
    (SELECT array_agg(id ORDER BY id) FROM batch2),
    (SELECT array_agg(lease_token + 1000 ORDER BY id) FROM batch2), NULL, 'bulk_done', 5);
SELECT DISTINCT s.state FROM batch2 b, hopper.job_status(b.id) s;
-- An empty queue: the completions happen, nothing is pulled.
SELECT count(*) AS pulled FROM hopper.queue_complete_many_pull(
    (SELECT array_agg(id ORDER BY id) FROM batch2),
    (SELECT array_agg(lease_token ORDER BY id) FROM batch2), NULL, 'bulk_done');
SELECT DISTINCT s.state FROM batch2 b, hopper.job_status(b.id) s;

\set VERBOSITY sqlstate
SELECT * FROM hopper.queue_complete_many_pull(NULL, '{}', NULL, 'bulk_done');
SELECT * FROM hopper.queue_complete_many_pull('{1,2}', '{1}', NULL, 'bulk_done');
SELECT * FROM hopper.queue_complete_many_pull('{}', '{}', NULL, 'bad queue');
SELECT * FROM hopper.queue_complete_many_pull('{}', '{}', NULL, NULL);
SELECT * FROM hopper.queue_complete_many_pull(ARRAY[999999999]::bigint[], '{1}', NULL, 'bulk_done');
SELECT * FROM hopper.queue_complete_many_pull('{}', '{}', NULL, 'bulk_done', 0);
\set VERBOSITY default
-- A typo in the queue name completes nothing: the held job is still running.
SELECT hopper.queue_push('bulk_done', '{"n": 14}') AS id14 \gset
SELECT id AS e, lease_token AS te FROM hopper.queue_pull('bulk_done', 1) \gset
SELECT * FROM hopper.queue_complete_many_pull(ARRAY[:e], ARRAY[:te::bigint], NULL, 'bad queue');
SELECT state FROM hopper.job_status(:e);
SELECT count(*) AS completed FROM hopper.queue_complete_many(ARRAY[:e], ARRAY[:te::bigint]);

SELECT queue, available, running, completed FROM hopper.queue_stats('bulk_done');

-- A batch larger than the history writer holds back (64 rows), one job with a payload stored out
-- of line: every job gets its history row, with its own payload and result, and both history
-- indexes find each of them.
SELECT hopper.queue_create('bulk_150') AS created;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('bulk_150',
    ARRAY(SELECT CASE WHEN g = 70
                      THEN pg_catalog.jsonb_build_object('n', g, 'big',
                               (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 400) i))
                      ELSE pg_catalog.jsonb_build_object('n', g) END
          FROM generate_series(1, 150) g));
CREATE TEMP TABLE held150 AS SELECT id, lease_token, payload FROM hopper.queue_pull('bulk_150', 150);
SELECT count(*) AS held FROM held150;
SELECT count(*) AS completed
FROM hopper.queue_complete_many((SELECT array_agg(id ORDER BY id) FROM held150),
                                (SELECT array_agg(lease_token ORDER BY id) FROM held150),
                                (SELECT array_agg(pg_catalog.jsonb_build_object('r', payload->'n'))
                                 FROM (SELECT payload FROM held150 ORDER BY id) s));
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT count(*) AS by_id, count(*) FILTER (WHERE j.payload = h.payload) AS payload_kept,
       count(*) FILTER (WHERE j.result = pg_catalog.jsonb_build_object('r', h.payload->'n'))
           AS result_kept,
       count(*) FILTER (WHERE pg_catalog.length(j.payload->>'big') = 12800) AS big_kept
FROM held150 h JOIN hopper.job_history j ON j.id = h.id;
SELECT count(*) AS by_queue FROM hopper.job_history WHERE queue = 'bulk_150' AND state = 'completed';
RESET enable_seqscan;
RESET enable_bitmapscan;
SELECT queue, available, running, completed FROM hopper.queue_stats('bulk_150');
