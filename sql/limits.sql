-- Concurrency limits: a per-key slot limit (default and overrides) and a queue-wide cap, enforced in
-- queue_pull and queue_complete_pull; slots come back on complete, fail, release, cancel and rescue.
SET hopper.notify = off;
\i sql/include/try.sql
-- Running jobs per key (and in all), from the operator's view.
CREATE FUNCTION pg_temp.running(q text) RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(coalesce(concurrency_key, 'all') || '=' || running, ' '
                      ORDER BY concurrency_key NULLS LAST)
    FROM hopper.queue_limits(q) WHERE scope IN ('key', 'queue')
$$;
-- Pulls into held(tag, id, lease_token) and shows what was claimed, tagged t+i from the payload.
CREATE TEMP TABLE held (tag text, id bigint, lease_token bigint);
CREATE FUNCTION pg_temp.pull(q text, n int, at timestamptz DEFAULT NULL) RETURNS text
LANGUAGE sql AS $$
    WITH p AS (SELECT * FROM hopper.queue_pull(q, n, at => at)),
    ins AS (INSERT INTO held SELECT (payload->>'t') || (payload->>'i'), id, lease_token FROM p
            RETURNING tag, id)
    SELECT coalesce(string_agg(tag, ' ' ORDER BY id), '(none)') FROM ins
$$;
CREATE FUNCTION pg_temp.push(q text, t text, n int, keyed boolean DEFAULT true) RETURNS bigint
LANGUAGE sql AS $$
    SELECT count(*) FROM hopper.queue_push_batch(q,
        (SELECT array_agg(jsonb_build_object('t', t, 'i', i) ORDER BY i) FROM generate_series(1, n) i),
        concurrency_keys => CASE WHEN keyed THEN array_fill(t, ARRAY[n]) END)
$$;

SELECT hopper.queue_create('slots') AS created;
-- Six jobs of tenant a, then three of b, then two without a key, in push order.
SELECT pg_temp.push('slots', 'a', 6), pg_temp.push('slots', 'b', 3), pg_temp.push('slots', 'u', 2, false);
-- Nothing configured yet.
SELECT * FROM hopper.queue_limits('slots');

-- Two per key by default: a pull of 10 takes a's first two, b's first two and the unkeyed jobs,
-- in pull order, passing over a's and b's later jobs instead of stopping at them.
SELECT hopper.queue_set_concurrency('slots', NULL, 2);
SELECT pg_temp.pull('slots', 10) AS first_pull;
SELECT pg_temp.running('slots');
SELECT pg_temp.pull('slots', 10) AS keys_full;

-- Every way a job stops running frees its slot: complete, fail, release, cancel.
SELECT hopper.queue_complete(id, lease_token) FROM held WHERE tag = 'a1';
SELECT pg_temp.pull('slots', 10) AS after_complete;
SELECT hopper.queue_fail(id, lease_token, 'boom', retry_in => '1 hour') FROM held WHERE tag = 'a2';
SELECT pg_temp.pull('slots', 10) AS after_fail;
SELECT hopper.queue_release(id, lease_token) FROM held WHERE tag = 'b1';
SELECT pg_temp.pull('slots', 10) AS after_release;
SELECT hopper.queue_cancel(id) FROM held WHERE tag = 'b2';
SELECT pg_temp.pull('slots', 10) AS after_cancel;
SELECT pg_temp.running('slots');

-- An override for one key beats the default, both ways.
SELECT hopper.queue_set_key_limit('slots', 'a', 3);
SELECT pg_temp.pull('slots', 10) AS a_raised;
SELECT hopper.queue_set_key_limit('slots', 'b', 1);
SELECT * FROM hopper.queue_limits('slots');
-- Lowering a limit below what runs stops nothing; new claims wait until enough have finished.
SELECT hopper.queue_set_key_limit('slots', 'a', 1);
SELECT pg_temp.pull('slots', 10) AS a_lowered;
SELECT hopper.queue_complete(id, lease_token) FROM held WHERE tag IN ('a3', 'a4');
SELECT pg_temp.pull('slots', 10) AS a_still_one_running;
-- Removing the override brings the default (2) back.
SELECT hopper.queue_set_key_limit('slots', 'a', NULL);
SELECT pg_temp.pull('slots', 10) AS a_default_again;
SELECT pg_temp.running('slots');

SELECT hopper.queue_drop('slots');
TRUNCATE held;

-- An expired lease holds its slot until it is rescued; the pull that rescues it claims the next job
-- of the key in its place (the rescued job waits behind it: it is due from the rescue on).
SELECT hopper.queue_create('rescue', lease => '10 seconds') AS created;
SELECT hopper.queue_set_concurrency('rescue', NULL, 1);
SELECT pg_temp.push('rescue', 'r', 3);
SELECT pg_temp.pull('rescue', 5) AS first;
SELECT pg_temp.pull('rescue', 5, at => now() + interval '9 seconds') AS lease_running;
SELECT pg_temp.pull('rescue', 5, at => now() + interval '11 seconds') AS lease_expired;
SELECT attempt, last_error FROM hopper.job_status((SELECT min(id) FROM held WHERE tag = 'r1'));
SELECT pg_temp.running('rescue');
SELECT hopper.queue_drop('rescue');
TRUNCATE held;

-- The queue-wide cap counts every running job, keyed or not.
SELECT hopper.queue_create('capped') AS created;
SELECT pg_temp.push('capped', 'k', 3), pg_temp.push('capped', 'u', 3, false);
SELECT hopper.queue_set_concurrency('capped', 4, NULL);
SELECT pg_temp.pull('capped', 10) AS capped_at_4;
SELECT pg_temp.pull('capped', 10) AS cap_full;
SELECT hopper.queue_complete(id, lease_token) FROM held WHERE tag = 'k1';
SELECT pg_temp.pull('capped', 10) AS one_freed;
-- The cap and a key limit together: the stricter one binds.
SELECT hopper.queue_set_concurrency('capped', 10, 1);
SELECT pg_temp.pull('capped', 10) AS key_limit_binds;
SELECT pg_temp.running('capped');
SELECT * FROM hopper.queue_limits('capped');
-- queue_complete_pull is a pull like any other: under a cap of 4 with 4 running, completing k2
-- frees one slot, which its pull takes (n1), however many it asks for.
SELECT hopper.queue_complete(id, lease_token) FROM held WHERE tag = 'u1';
SELECT hopper.queue_set_concurrency('capped', 4, 1);
SELECT pg_temp.push('capped', 'n', 2);
SELECT (payload->>'t') || (payload->>'i') AS next
FROM held h, hopper.queue_complete_pull(h.id, h.lease_token, NULL, 'capped', 5) WHERE h.tag = 'k2';
SELECT pg_temp.running('capped');
-- Without limits the queue takes the unserialized claim again.
SELECT hopper.queue_set_concurrency('capped', NULL, NULL);
SELECT pg_temp.pull('capped', 10) AS unlimited;
SELECT limited FROM hopper.queues WHERE name = 'capped';
-- The flag follows the key limits one by one: set while any is left, cleared with the last; and
-- a change that leaves it as it was does not rewrite the queue's row (which would re-plan every
-- statement reading hopper.queues after each of many keys set in one transaction).
SELECT hopper.queue_set_key_limit('capped', 'a', 1);
SELECT xmin AS row_version FROM hopper.queues WHERE name = 'capped' \gset
SELECT hopper.queue_set_key_limit('capped', 'b', 2);
SELECT hopper.queue_set_key_limit('capped', 'a', NULL);
SELECT limited, xmin = :'row_version' AS row_untouched FROM hopper.queues WHERE name = 'capped';
SELECT hopper.queue_set_key_limit('capped', 'b', NULL);
SELECT limited FROM hopper.queues WHERE name = 'capped';

-- A limited queue is pulled under READ COMMITTED only: an older snapshot would miss claims.
SELECT hopper.queue_set_concurrency('capped', 6, NULL);
SELECT pg_temp.push('capped', 'x', 1);
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.try($$SELECT hopper.queue_pull('capped')$$);
ROLLBACK;
-- A transaction that pulled from a limited queue cannot be prepared (its claims are counted by
-- its session), with a real SQLSTATE; the prepare rolls it back, claim included.
SELECT count(*) AS running_before FROM hopper.jobs WHERE queue = 'capped' AND state = 'running';
BEGIN;
SELECT count(*) AS pulled FROM hopper.queue_pull('capped', 1);
\set VERBOSITY sqlstate
PREPARE TRANSACTION 'hopper_limited';
\set VERBOSITY default
SELECT count(*) AS running_after FROM hopper.jobs WHERE queue = 'capped' AND state = 'running';
-- So can none that pulled from a rate-limited queue, whose claim keeps the queue's lock to commit:
-- prepared, the transaction would hold it, and every pull of the queue would wait until someone
-- ended it.
SELECT hopper.queue_create('rated_prepare') AS created;
SELECT hopper.queue_set_rate_limit('rated_prepare', 100, '1 minute');
SELECT pg_temp.push('rated_prepare', 'x', 2);
BEGIN;
SELECT count(*) AS pulled FROM hopper.queue_pull('rated_prepare', 1);
\set VERBOSITY sqlstate
PREPARE TRANSACTION 'hopper_rated';
\set VERBOSITY default
-- A pull rolled back with its savepoint leaves nothing to refuse: the prepare goes on to the
-- server's own check (this cluster allows no prepared transactions: 55000).
BEGIN;
SAVEPOINT s;
SELECT count(*) AS pulled FROM hopper.queue_pull('rated_prepare', 1);
ROLLBACK TO SAVEPOINT s;
\set VERBOSITY sqlstate
PREPARE TRANSACTION 'hopper_rated';
\set VERBOSITY default
SELECT pg_temp.pull('rated_prepare', 10) AS both_back;
SELECT hopper.queue_drop('rated_prepare');
-- A paused limited queue hands out nothing, as any paused queue.
SELECT hopper.queue_pause('capped');
SELECT pg_temp.pull('capped', 10) AS paused;
SELECT hopper.queue_resume('capped');
SELECT pg_temp.pull('capped', 10) AS resumed;
SELECT hopper.queue_drop('capped');
SELECT count(*) AS leftovers FROM hopper.queue_key_limits;

-- Bad input: a real SQLSTATE, nothing changed.
SELECT hopper.queue_create('limits_bad') AS created;
SELECT pg_temp.try($$SELECT hopper.queue_set_concurrency(NULL, 1, 1)$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_concurrency('bad name', 1, 1)$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_concurrency('no-such-queue', 1, 1)$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_concurrency('limits_bad', 0, NULL)$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_concurrency('limits_bad', -1, NULL)$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_concurrency('limits_bad', NULL, 0)$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_concurrency('limits_bad', 1000001, NULL)$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_key_limit('limits_bad', NULL, 1)$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_key_limit('limits_bad', '', 1)$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_key_limit('limits_bad', repeat('k', 513), 1)$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_key_limit('limits_bad', 'k', 0)$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_key_limit('limits_bad', 'k', 2000000)$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_key_limit('no-such-queue', 'k', 1)$$);
SELECT pg_temp.try($$SELECT hopper.queue_limits(NULL)$$);
SELECT pg_temp.try($$SELECT hopper.queue_limits('no-such-queue')$$);
SELECT * FROM hopper.queue_limits('limits_bad');
SELECT limited FROM hopper.queues WHERE name = 'limits_bad';
SELECT hopper.queue_drop('limits_bad');
