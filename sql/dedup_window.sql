-- Dedup windows: with dedup_window W, a push with dedup_key K returns the first job of its queue
-- with key K that is unfinished, or that finished after being created within W; otherwise it
-- inserts. Races with the original finishing are in test/isolation/specs/dedup_window_race.spec.
SET hopper.notify = off;
\i sql/include/try.sql
SELECT hopper.queue_create('dw') AS created;

-- Without a window a finished job frees its key; with one it still answers.
SELECT hopper.queue_push('dw', '{"n": 1}', dedup_key => 'k1') AS first \gset
SELECT hopper.queue_push('dw', '{"n": 2}', dedup_key => 'k1', dedup_window => '10 minutes') = :first
    AS unfinished_dedups;
SELECT hopper.queue_complete(id, lease_token) AS completed FROM hopper.queue_pull('dw');
SELECT hopper.queue_push('dw', '{"n": 3}', dedup_key => 'k1', dedup_window => '10 minutes') = :first
    AS completed_dedups;
SELECT hopper.queue_push_batch('dw', ARRAY['{"n": 4}', '{"n": 5}']::jsonb[],
                               dedup_keys => ARRAY['k1', 'k-new'],
                               dedup_window => '10 minutes') = :first AS batch_slot
LIMIT 1;
-- Nothing was left behind by the deduplicated pushes: one new job (k-new) waits.
SELECT available, completed FROM hopper.queue_stats('dw');
-- A window too short for the original's age inserts (created_at is pushed back by hand to age it).
UPDATE hopper.job_history SET created_at = created_at - interval '11 minutes' WHERE id = :first;
SELECT hopper.queue_push('dw', '{"n": 6}', dedup_key => 'k1', dedup_window => '10 minutes') <> :first
    AS outside_window_inserts;
SELECT hopper.queue_purge('dw') AS purged;
SELECT hopper.queue_push('dw', '{"n": 7}', dedup_key => 'k1', dedup_window => '12 minutes') = :first
    AS wider_window_dedups;

-- Dead and cancelled jobs count as finished too.
SELECT hopper.queue_push('dw', '{}', dedup_key => 'dead', max_attempts => 1) AS dead_id \gset
SELECT hopper.queue_fail(id, lease_token, 'boom') AS failed FROM hopper.queue_pull('dw');
SELECT hopper.queue_push('dw', '{}', dedup_key => 'dead', dedup_window => '1 hour') = :dead_id
    AS dead_dedups;
SELECT hopper.queue_push('dw', '{}', dedup_key => 'gone') AS cancelled_id \gset
SELECT hopper.queue_cancel(:cancelled_id) AS cancelled;
SELECT hopper.queue_push('dw', '{}', dedup_key => 'gone', dedup_window => '1 hour') = :cancelled_id
    AS cancelled_dedups;
-- Keys are per queue.
SELECT hopper.queue_push('dw-other', '{}', dedup_key => 'gone', dedup_window => '1 hour')
    <> :cancelled_id AS other_queue_inserts;

-- When several finished jobs share a key (pushed without a window), the first one answers; an
-- unfinished one wins over them.
SELECT hopper.queue_push('dw', '{}', dedup_key => 'many') AS many1 \gset
SELECT hopper.queue_complete(id, lease_token) AS completed FROM hopper.queue_pull('dw', 10) WHERE id = :many1;
SELECT hopper.queue_push('dw', '{}', dedup_key => 'many') AS many2 \gset
SELECT hopper.queue_complete(id, lease_token) AS completed FROM hopper.queue_pull('dw', 10) WHERE id = :many2;
SELECT hopper.queue_push('dw', '{}', dedup_key => 'many', dedup_window => '1 hour') = :many1
    AS oldest_answers;
SELECT hopper.queue_push('dw', '{}', dedup_key => 'many') AS many3 \gset
SELECT hopper.queue_push('dw', '{}', dedup_key => 'many', dedup_window => '1 hour') = :many3
    AS unfinished_wins;
SELECT (SELECT array_agg(x) FROM hopper.queue_push_batch('dw', ARRAY['{}', '{}']::jsonb[],
        dedup_keys => ARRAY['many', 'many'], dedup_window => '1 hour') x)
    = ARRAY[:many3, :many3]::bigint[] AS batch_unfinished_wins;

-- Bad input: 22023, nothing pushed.
SELECT count(*) AS before FROM hopper.queue_jobs('dw') \gset
SELECT pg_temp.try($$SELECT hopper.queue_push('dw', '{}', dedup_key => 'x', dedup_window => '0 seconds')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('dw', '{}', dedup_key => 'x', dedup_window => '-1 minute')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('dw', '{}', dedup_key => 'x', dedup_window => '11 years')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('dw', '{}', dedup_window => '1 hour')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push_batch('dw', ARRAY['{}']::jsonb[], dedup_window => '1 hour')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push_batch('dw', ARRAY['{}']::jsonb[], dedup_keys => ARRAY[NULL]::text[], dedup_window => '1 hour')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push_batch('dw', ARRAY['{}']::jsonb[], dedup_keys => ARRAY['x'], dedup_window => '0 seconds')$$);
SELECT count(*) = :before AS nothing_pushed FROM hopper.queue_jobs('dw');

SELECT hopper.queue_drop('dw') AS dropped, hopper.queue_drop('dw-other') AS dropped_other;
