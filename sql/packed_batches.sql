-- Packed batches (hopper.pack_batches): queue_push_batch stores due jobs without keys in packed
-- rows of up to 100; claims merge them with ordinary rows in pull order.
SET hopper.pack_batches = on;
SELECT hopper.queue_create('pk');

-- 250 jobs: three packed rows and no row per job; ids come back ascending in payload order.
WITH pushed AS (
    SELECT id, row_number() OVER () AS slot
    FROM hopper.queue_push_batch('pk', ARRAY(SELECT jsonb_build_object('n', g)
                                             FROM generate_series(1, 250) g)) AS t(id))
SELECT count(*) AS pushed, bool_and(id = (SELECT min(id) FROM pushed) + slot - 1) AS ascending
FROM pushed;
SELECT count(*) AS packed_rows, sum(cardinality(ids)) AS packed_jobs
FROM hopper.job_batches WHERE queue = 'pk';
SELECT count(*) AS job_rows FROM hopper.jobs WHERE queue = 'pk';

-- Payloads that average more than 1 kB get a row each: a claim reads its packed row's payloads
-- whole, and one job would cost the reading of a hundred large ones.
SELECT count(*) AS pushed FROM hopper.queue_push_batch('pk-large',
    ARRAY(SELECT jsonb_build_object('pad', repeat('x', 1100)) FROM generate_series(1, 3)));
SELECT count(*) AS packed_rows FROM hopper.job_batches WHERE queue = 'pk-large';
SELECT count(*) AS job_rows FROM hopper.jobs WHERE queue = 'pk-large';
SELECT hopper.queue_drop('pk-large') AS dropped;

-- Pulls take from the front of the first row, in order, each job leased with attempt 1.
SELECT payload->>'n' AS n, attempt, lease_token IS NOT NULL AS leased, queue
FROM hopper.queue_pull('pk', 3);
SELECT taken FROM hopper.job_batches WHERE queue = 'pk' ORDER BY first_id LIMIT 1;

-- A single push with a better priority overtakes the packed jobs.
SELECT hopper.queue_push('pk', '{"n": "urgent"}', priority => -1) IS NOT NULL AS pushed;
SELECT payload->>'n' AS n FROM hopper.queue_pull('pk', 2);

-- A claimed packed job is an ordinary running job: its token completes it, a stale one does not.
SELECT p.payload->>'n' AS n, hopper.queue_complete(p.id, p.lease_token + 1000) AS stale,
       hopper.queue_complete(p.id, p.lease_token) AS completed
FROM hopper.queue_pull('pk', 1) p;
SELECT p.payload->>'n' AS n, hopper.queue_fail(p.id, p.lease_token, 'boom', retry_in => '1 hour')
       AS after_failure
FROM hopper.queue_pull('pk', 1) p;

-- One pull across rows: the rest of the first row and the front of the second.
SELECT count(*) AS pulled, min((payload->>'n')::int) AS first, max((payload->>'n')::int) AS last
FROM hopper.queue_pull('pk', 150);
SELECT count(*) AS packed_rows, sum(cardinality(ids) - taken) AS waiting
FROM hopper.job_batches WHERE queue = 'pk';
SELECT available, scheduled, running FROM hopper.queue_stats('pk');

-- The kinds filter applies to a packed row's kind.
SELECT count(*) FROM hopper.queue_push_batch('pk-kinds', ARRAY['{"a": 1}', '{"a": 2}']::jsonb[],
                                             kind => 'resize');
SELECT count(*) AS other FROM hopper.queue_pull('pk-kinds', 5, kinds => ARRAY['other']);
SELECT count(*) AS resize FROM hopper.queue_pull('pk-kinds', 5, kinds => ARRAY['resize']);

-- Rows smaller than a claim: the claim locks rows until their jobs number n, so a later job of
-- the queue never goes ahead of a waiting packed one. Two urgent rows of two and three jobs and a
-- job behind them: the first three in pull order are the urgent ones, through the direct claims
-- and through the statements (a kinds filter), for pulls and takes alike.
CREATE FUNCTION pg_temp.small_rows(q text) RETURNS void LANGUAGE sql AS $$
    SELECT hopper.queue_push(q, '{"n": "later"}', priority => 5, kind => 'k');
    SELECT hopper.queue_push_batch(q, ARRAY['{"n": "a1"}', '{"n": "a2"}']::jsonb[], priority => -1,
                                   kind => 'k');
    SELECT hopper.queue_push_batch(q, ARRAY['{"n": "b1"}', '{"n": "b2"}', '{"n": "b3"}']::jsonb[],
                                   priority => -1, kind => 'k');
$$;
SELECT pg_temp.small_rows('pk-order-pull'), pg_temp.small_rows('pk-order-take'),
       pg_temp.small_rows('pk-order-kinds-pull'), pg_temp.small_rows('pk-order-kinds-take');
SELECT string_agg(payload->>'n', ' ' ORDER BY id) AS pulled
FROM hopper.queue_pull('pk-order-pull', 3);
SELECT string_agg(payload->>'n', ' ' ORDER BY id) AS taken
FROM hopper.queue_take('pk-order-take', 3);
SELECT string_agg(payload->>'n', ' ' ORDER BY id) AS pulled_with_kinds
FROM hopper.queue_pull('pk-order-kinds-pull', 3, kinds => ARRAY['k']);
SELECT string_agg(payload->>'n', ' ' ORDER BY id) AS taken_with_kinds
FROM hopper.queue_take('pk-order-kinds-take', 3, kinds => ARRAY['k']);
-- And the rest of a take goes on in pull order: the last urgent job, then the later one.
SELECT string_agg(payload->>'n', ' ' ORDER BY ordinality) AS rest
FROM hopper.queue_take('pk-order-take', 3) WITH ORDINALITY;
SELECT hopper.queue_drop(q) FROM unnest(ARRAY['pk-order-pull', 'pk-order-take',
    'pk-order-kinds-pull', 'pk-order-kinds-take']) q;

-- queue_take: a rollback gives the jobs back to the row; a commit finishes them into history.
SELECT count(*) FROM hopper.queue_push_batch('pk-take', ARRAY(SELECT jsonb_build_object('n', g)
                                                             FROM generate_series(1, 5) g));
BEGIN;
SELECT payload->>'n' AS n, attempt FROM hopper.queue_take('pk-take', 2);
ROLLBACK;
SELECT taken FROM hopper.job_batches WHERE queue = 'pk-take';
BEGIN;
SELECT payload->>'n' AS n, attempt FROM hopper.queue_take('pk-take', 2);
COMMIT;
SELECT payload->>'n' AS n, state, attempt FROM hopper.job_history WHERE queue = 'pk-take'
ORDER BY n;

-- A taken packed job that fails after a rollback to a savepoint is put back and its attempt
-- counted, as an ordinary taken job is.
BEGIN;
SELECT id AS taken_id FROM hopper.queue_take('pk-take', 1) \gset
SAVEPOINT work;
ROLLBACK TO SAVEPOINT work;
SELECT hopper.queue_fail_taken(:taken_id, 'broke', retry_in => '1 hour') AS failed;
COMMIT;
SELECT state, attempt, last_error FROM hopper.job_status(:taken_id);
SELECT count(*) AS in_history FROM hopper.job_history WHERE id = :taken_id;
-- In a queue that keeps no history, a take that empties a packed row deletes it: the jobs are
-- rebuilt from the row as the take deleted it, and both come back with their attempt counted.
SELECT hopper.queue_create('pk-unkept', retention => '0') AS created;
SELECT count(*) FROM hopper.queue_push_batch('pk-unkept', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[]);
BEGIN;
SELECT pg_catalog.array_agg(id ORDER BY id) AS emptied_ids FROM hopper.queue_take('pk-unkept', 2)
\gset
SELECT count(*) AS rows_left FROM hopper.job_batches WHERE queue = 'pk-unkept';
SAVEPOINT work;
ROLLBACK TO SAVEPOINT work;
SELECT hopper.queue_fail_taken(id, 'broke', retry_in => '1 hour') AS failed
FROM unnest(:'emptied_ids'::bigint[]) id ORDER BY id;
COMMIT;
SELECT payload->>'n' AS n, state, attempt, last_error, priority, max_attempts
FROM hopper.jobs WHERE queue = 'pk-unkept' ORDER BY id;
-- A take that rolled back left its job in the packed row: failing it there still counts the
-- attempt (the row becomes rows first, as a cancel makes it).
SELECT count(*) FROM hopper.queue_push_batch('pk-back', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[]);
BEGIN;
SELECT id AS rolled_back_id FROM hopper.queue_take('pk-back', 1) \gset
ROLLBACK;
SELECT hopper.queue_fail_taken(:rolled_back_id, 'broke after all', retry_in => '1 hour') AS failed;
SELECT state, attempt, last_error FROM hopper.job_status(:rolled_back_id);
SELECT payload->>'n' AS n FROM hopper.queue_take('pk-back', 5) ORDER BY id;

-- A queue with limits counts rows: its first claim turns packed rows into rows, and its batches
-- are not packed.
SELECT count(*) FROM hopper.queue_push_batch('pk-limited', ARRAY(SELECT jsonb_build_object('n', g)
                                                                FROM generate_series(1, 4) g));
SELECT hopper.queue_set_rate_limit('pk-limited', 100, '1 second');
SELECT payload->>'n' AS n FROM hopper.queue_pull('pk-limited', 2);
SELECT count(*) AS packed_rows FROM hopper.job_batches WHERE queue = 'pk-limited';
SELECT count(*) AS job_rows FROM hopper.jobs WHERE queue = 'pk-limited';
SELECT count(*) FROM hopper.queue_push_batch('pk-limited', ARRAY['{"x": 1}', '{"x": 2}']::jsonb[]);
SELECT count(*) AS packed_rows FROM hopper.job_batches WHERE queue = 'pk-limited';

-- Not packed: keyed batches, batches scheduled for later, one-job batches, and with the setting
-- off.
SELECT count(*) FROM hopper.queue_push_batch('pk-rows', ARRAY['{"k": 1}', '{"k": 2}']::jsonb[],
                                             dedup_keys => ARRAY['a', 'b']);
SELECT count(*) FROM hopper.queue_push_batch('pk-rows', ARRAY['{"c": 1}', '{"c": 2}']::jsonb[],
                                             concurrency_keys => ARRAY['t1', 't2']);
SELECT count(*) FROM hopper.queue_push_batch('pk-rows', ARRAY['{"s": 1}', '{"s": 2}']::jsonb[],
                                             run_at => now() + interval '1 hour');
SELECT count(*) FROM hopper.queue_push_batch('pk-rows', ARRAY['{"one": 1}']::jsonb[]);
SET hopper.pack_batches = off;
SELECT count(*) FROM hopper.queue_push_batch('pk-rows', ARRAY['{"off": 1}', '{"off": 2}']::jsonb[]);
SELECT count(*) AS packed_rows FROM hopper.job_batches WHERE queue = 'pk-rows';
SELECT count(*) AS job_rows FROM hopper.jobs WHERE queue = 'pk-rows';
RESET hopper.pack_batches;

-- A packed row as stored: ids and payloads side by side in payload order, the batch's settings
-- once; max_attempts from the push, or else from the queue.
SET hopper.pack_batches = on;
SELECT hopper.queue_create('pk-row', max_attempts => 4);
SELECT count(*) FROM hopper.queue_push_batch('pk-row', ARRAY(SELECT jsonb_build_object('n', g)
                                                            FROM generate_series(1, 120) g),
                                             priority => 3, kind => 'thumb');
SELECT count(*) FROM hopper.queue_push_batch('pk-row', ARRAY['{"m": 1}', '{"m": 2}']::jsonb[],
                                             max_attempts => 2);
SELECT cardinality(ids) AS jobs, first_id = ids[1] AS first_is_first,
       last_id = ids[cardinality(ids)] AS last_is_last,
       ids = ARRAY(SELECT i FROM unnest(ids) i ORDER BY i) AS ascending,
       payloads[1] AS first_payload, payloads[cardinality(payloads)] AS last_payload,
       priority, kind, max_attempts, taken, run_at = created_at AS due_at_push
FROM hopper.job_batches WHERE queue = 'pk-row' ORDER BY first_id;

-- With a trigger on hopper.job_batches, batches go through the SQL INSERT, and the trigger fires.
CREATE FUNCTION regress_pk_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE NOTICE 'packed row of % jobs', cardinality(NEW.ids);
    RETURN NEW;
END $$;
CREATE TRIGGER regress_pk_seen BEFORE INSERT ON hopper.job_batches
    FOR EACH ROW EXECUTE FUNCTION regress_pk_seen();
SELECT count(*) FROM hopper.queue_push_batch('pk-row', ARRAY(SELECT jsonb_build_object('t', g)
                                                            FROM generate_series(1, 150) g));
DROP TRIGGER regress_pk_seen ON hopper.job_batches;
DROP FUNCTION regress_pk_seen();
SELECT count(*) AS packed_rows, sum(cardinality(ids)) AS packed_jobs
FROM hopper.job_batches WHERE queue = 'pk-row';

-- A producer role packs as the owner does; without SELECT on hopper.job_batches (the ids the
-- INSERT returns) the push is refused and writes nothing.
\i sql/include/try.sql
GRANT EXECUTE ON FUNCTION pg_temp.try(text) TO PUBLIC;
CREATE ROLE regress_pk_app;
GRANT hopper_producer TO regress_pk_app;
SET ROLE regress_pk_app;
SET hopper.pack_batches = on;
SELECT pg_temp.try($$SELECT count(*) FROM hopper.queue_push_batch('pk-row', ARRAY['{"r": 1}', '{"r": 2}']::jsonb[])$$)
    AS producer_packs;
RESET ROLE;
REVOKE SELECT ON hopper.job_batches FROM hopper_producer;
SET ROLE regress_pk_app;
SELECT pg_temp.try($$SELECT count(*) FROM hopper.queue_push_batch('pk-row', ARRAY['{"r": 3}', '{"r": 4}']::jsonb[])$$)
    AS without_select;
RESET ROLE;
GRANT SELECT ON hopper.job_batches TO hopper_producer;
REVOKE USAGE ON SEQUENCE hopper.job_id_seq FROM hopper_producer;
SET ROLE regress_pk_app;
SELECT pg_temp.try($$SELECT count(*) FROM hopper.queue_push_batch('pk-row', ARRAY['{"r": 5}', '{"r": 6}']::jsonb[])$$)
    AS without_sequence;
RESET ROLE;
GRANT USAGE ON SEQUENCE hopper.job_id_seq TO hopper_producer;
DROP ROLE regress_pk_app;
SELECT count(*) AS packed_rows, sum(cardinality(ids)) AS packed_jobs
FROM hopper.job_batches WHERE queue = 'pk-row';
RESET hopper.pack_batches;

SELECT bool_and(hopper.queue_drop(q)) AS dropped
FROM unnest(ARRAY['pk', 'pk-kinds', 'pk-take', 'pk-unkept', 'pk-back', 'pk-limited', 'pk-rows', 'pk-row']) q;
SELECT count(*) AS packed_rows_left FROM hopper.job_batches WHERE queue LIKE 'pk%';
