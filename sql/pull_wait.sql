-- queue_pull(..., wait => interval), and queue_take's: a pull that finds no job waits for one, up
-- to the interval. The wake-ups from other sessions are tested in TAP t/007; here, what one
-- session can see.
SET hopper.notify = off;
\i sql/include/try.sql
SELECT hopper.queue_create('pw') AS created;

-- Nothing to claim: the pull returns no rows once the wait has passed, not before.
SELECT pg_catalog.clock_timestamp() AS t0 \gset
SELECT count(*) AS claimed FROM hopper.queue_pull('pw', wait => '0.3 s');
SELECT pg_catalog.clock_timestamp() - :'t0'::timestamptz >= interval '0.3 s' AS waited_the_interval;

-- A job there: claimed at once, without waiting.
SELECT hopper.queue_push('pw', '{"n": 1}') > 0 AS pushed;
SELECT pg_catalog.clock_timestamp() AS t0 \gset
SELECT payload, attempt FROM hopper.queue_pull('pw', wait => '1 minute');
SELECT pg_catalog.clock_timestamp() - :'t0'::timestamptz < interval '30 s' AS returned_at_once;

-- A job pushed by this transaction after it began is due for a waiting pull in it, which judges
-- "due" by the clock, not by the transaction's start.
BEGIN;
SELECT pg_catalog.pg_sleep(0.05);
SELECT hopper.queue_push('pw', '{"n": 2}', run_at => pg_catalog.clock_timestamp()) > 0 AS pushed;
SELECT payload FROM hopper.queue_pull('pw', wait => '5 s');
COMMIT;

-- wait => 0 or NULL: no wait, as without it.
SELECT count(*) AS claimed FROM hopper.queue_pull('pw', wait => '0');
SELECT count(*) AS claimed FROM hopper.queue_pull('pw', wait => NULL);

-- A job scheduled for later is returned when it falls due, inside the wait.
SELECT hopper.queue_push('pw', '{"n": 3}', run_at => pg_catalog.clock_timestamp() + interval '0.4 s') > 0 AS pushed;
SELECT payload FROM hopper.queue_pull('pw', wait => '10 s');

-- Out of range.
SELECT pg_temp.try($$SELECT count(*) FROM hopper.queue_pull('pw', wait => '-1 s')$$);
SELECT pg_temp.try($$SELECT count(*) FROM hopper.queue_pull('pw', wait => '2 hours')$$);

-- A transaction snapshot would never see the jobs it waits for.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.try($$SELECT count(*) FROM hopper.queue_pull('pw', wait => '1 s')$$);
ROLLBACK;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) AS claimed FROM hopper.queue_pull('pw', wait => '0');
ROLLBACK;

-- A queue with a rate limit claims under a lock held to the end of the transaction: its pulls do
-- not wait, so that a waiting one cannot hold up the others.
SELECT hopper.queue_set_rate_limit('pw', 100, '1 second') AS rated;
SELECT pg_catalog.clock_timestamp() AS t0 \gset
SELECT count(*) AS claimed FROM hopper.queue_pull('pw', wait => '1 minute');
SELECT pg_catalog.clock_timestamp() - :'t0'::timestamptz < interval '30 s' AS returned_at_once;
SELECT hopper.queue_set_rate_limit('pw', NULL, NULL) AS unrated;
-- One with only concurrency limits lets its lock go once the claim is made, and waits.
SELECT hopper.queue_set_concurrency('pw', 5, NULL) AS limited;
SELECT pg_catalog.clock_timestamp() AS t0 \gset
SELECT count(*) AS claimed FROM hopper.queue_pull('pw', wait => '0.3 s');
SELECT pg_catalog.clock_timestamp() - :'t0'::timestamptz >= interval '0.3 s' AS waited;

-- A cancelled wait: the statement fails with query_canceled and the session goes on.
SELECT hopper.queue_set_concurrency('pw', NULL, NULL) AS unlimited;
SET statement_timeout = '200ms';
\set VERBOSITY sqlstate
SELECT count(*) FROM hopper.queue_pull('pw', wait => '1 minute');
\set VERBOSITY default
RESET statement_timeout;
SELECT hopper.queue_push('pw', '{"n": 4}') > 0 AS pushed;
SELECT payload FROM hopper.queue_pull('pw', wait => '1 s');

-- queue_take waits the same way, in the caller's transaction.
BEGIN;
SELECT pg_catalog.clock_timestamp() AS t0 \gset
SELECT count(*) AS taken FROM hopper.queue_take('pw', wait => '0.3 s');
SELECT pg_catalog.clock_timestamp() - :'t0'::timestamptz >= interval '0.3 s' AS waited_the_interval;
SELECT hopper.queue_push('pw', '{"n": 5}', run_at => pg_catalog.clock_timestamp() + interval '0.3 s') > 0 AS pushed;
SELECT payload FROM hopper.queue_take('pw', wait => '10 s');
COMMIT;
SELECT state FROM hopper.job_status((SELECT max(id) FROM hopper.job_history WHERE queue = 'pw'));
SELECT pg_temp.try($$SELECT count(*) FROM hopper.queue_take('pw', wait => '-1 s')$$);
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT pg_temp.try($$SELECT count(*) FROM hopper.queue_take('pw', wait => '1 s')$$);
ROLLBACK;

-- An expired lease the waiting pull takes over and cannot claim itself (another kind, or its last
-- attempt: dead) would be held by its transaction for the whole wait, out of every other
-- worker's reach: the pull returns at once instead, and the rescue is committed.
SELECT hopper.reaper_stop() AS reaper_stopped;
SELECT hopper.queue_create('pw_rescue', max_attempts => 2) AS created;
SELECT hopper.queue_push('pw_rescue', '{}', kind => 'b') AS expiring \gset
SELECT count(*) AS pulled FROM hopper.queue_pull('pw_rescue', 1);
UPDATE hopper.jobs SET lease_until = now() - interval '1 s' WHERE id = :expiring;
SELECT pg_catalog.clock_timestamp() AS t0 \gset
SELECT count(*) AS claimed FROM hopper.queue_pull('pw_rescue', 1, kinds => ARRAY['a'], wait => '5 s');
SELECT pg_catalog.clock_timestamp() - :'t0'::timestamptz < interval '2.5 s' AS returned_at_once;
SELECT state, attempt FROM hopper.jobs WHERE id = :expiring;
-- The second attempt, then its lease runs out too: the rescue makes it dead.
SELECT count(*) AS pulled FROM hopper.queue_pull('pw_rescue', 1);
UPDATE hopper.jobs SET lease_until = now() - interval '1 s' WHERE id = :expiring;
SELECT pg_catalog.clock_timestamp() AS t0 \gset
SELECT count(*) AS taken FROM hopper.queue_take('pw_rescue', 1, wait => '5 s');
SELECT pg_catalog.clock_timestamp() - :'t0'::timestamptz < interval '2.5 s' AS returned_at_once;
SELECT state FROM hopper.job_status(:expiring);
SELECT hopper.reaper_start() AS reaper_started;
SELECT hopper.queue_drop('pw_rescue') AS dropped;

SELECT hopper.queue_drop('pw') AS dropped;
