-- A pull's `at` is for tests: it claims as of that time. For any role but a superuser its leases
-- still run from the real clock, so a pull dated a century ahead gets a lease within the cap of a
-- day, not one that runs out in a century. Every way a lease is made: the direct claim (no kinds
-- filter, a database of its own), the claim statement (a kinds filter), packed rows both ways, a
-- limited queue both ways (the window claim and the statements), a rate-limited queue, and the
-- pulls of queue_complete_pull and queue_complete_many_pull. A superuser's pull dated ahead still
-- leases from its `at`.
\set orig :DBNAME
SET client_min_messages = warning;
-- Left behind only by a run that stopped in the middle of this file.
DROP DATABASE IF EXISTS hopper_lease_clock WITH (FORCE);
DROP ROLE IF EXISTS regress_lease_worker;
CREATE DATABASE hopper_lease_clock;
\c hopper_lease_clock
SET client_min_messages = warning;
CREATE EXTENSION hopper;
SET hopper.notify = off;
CREATE ROLE regress_lease_worker IN ROLE hopper_worker;

SELECT hopper.queue_create('lc_plain'), hopper.queue_create('lc_packed'),
       hopper.queue_create('lc_limited'), hopper.queue_create('lc_rated');
SELECT hopper.queue_set_concurrency('lc_limited', 100, NULL);
SELECT hopper.queue_set_rate_limit('lc_rated', 100, '1 hour');
SELECT count(hopper.queue_push(q, '{}', kind => 'k'))
FROM unnest(ARRAY['lc_plain', 'lc_limited', 'lc_rated']) q, generate_series(1, 5);
SET hopper.pack_batches = on;
SELECT count(*) FROM hopper.queue_push_batch('lc_packed', array_fill('{}'::jsonb, ARRAY[5]), kind => 'k');
RESET hopper.pack_batches;
SELECT count(*) AS packed_rows FROM hopper.job_batches;

-- Within a day of now (a lease of '1 day'), or of 30 s (the queue's lease), and not dated ahead.
CREATE FUNCTION pg_temp.capped(lease_until timestamptz, lease interval) RETURNS text
LANGUAGE sql AS $$
    SELECT CASE WHEN lease_until IS NULL THEN 'no job'
                WHEN lease_until <= clock_timestamp() + lease THEN 'capped'
                ELSE 'runs until ' || extract(year FROM lease_until) END
$$;
GRANT EXECUTE ON FUNCTION pg_temp.capped(timestamptz, interval) TO regress_lease_worker;

SET ROLE regress_lease_worker;
SELECT pg_temp.capped(lease_until, '1 day') AS plain_direct
FROM hopper.queue_pull('lc_plain', 1, lease => '1 day', at => now() + interval '100 years');
SELECT pg_temp.capped(lease_until, '1 day') AS plain_statement
FROM hopper.queue_pull('lc_plain', 1, lease => '1 day', kinds => ARRAY['k'],
                       at => now() + interval '100 years');
SELECT pg_temp.capped(lease_until, '30 seconds') AS queue_lease
FROM hopper.queue_pull('lc_plain', 1, at => now() + interval '100 years');
SELECT pg_temp.capped(lease_until, '1 day') AS packed_direct
FROM hopper.queue_pull('lc_packed', 1, lease => '1 day', at => now() + interval '100 years');
SELECT pg_temp.capped(lease_until, '1 day') AS packed_statement
FROM hopper.queue_pull('lc_packed', 1, lease => '1 day', kinds => ARRAY['k'],
                       at => now() + interval '100 years');
SELECT pg_temp.capped(lease_until, '1 day') AS limited_direct
FROM hopper.queue_pull('lc_limited', 1, lease => '1 day', at => now() + interval '100 years');
SELECT pg_temp.capped(lease_until, '1 day') AS limited_statement
FROM hopper.queue_pull('lc_limited', 1, lease => '1 day', kinds => ARRAY['k'],
                       at => now() + interval '100 years');
SELECT pg_temp.capped(lease_until, '1 day') AS rated
FROM hopper.queue_pull('lc_rated', 1, lease => '1 day', at => now() + interval '100 years');
SELECT pg_temp.capped(lease_until, '1 day') AS complete_pull
FROM hopper.queue_complete_pull(NULL, NULL, NULL, 'lc_plain', 1, lease => '1 day',
                                at => now() + interval '100 years');
SELECT pg_temp.capped(lease_until, '1 day') AS complete_many_pull
FROM hopper.queue_complete_many_pull('{}', '{}', NULL, 'lc_packed', 1, lease => '1 day',
                                     at => now() + interval '100 years');
RESET ROLE;

-- What the table holds agrees.
SELECT queue, count(*) AS running, bool_and(pg_temp.capped(lease_until, '1 day') = 'capped') AS capped
FROM hopper.jobs WHERE state = 'running' GROUP BY queue ORDER BY queue;

-- A superuser's pull dated ahead leases from its `at`, so that tests can travel in time.
SELECT lease_until >= now() + interval '1 hour' AS from_at
FROM hopper.queue_pull('lc_limited', 1, at => now() + interval '1 hour');
SELECT lease_until >= now() + interval '1 hour' AS from_at
FROM hopper.queue_pull('lc_plain', 1, at => now() + interval '1 hour');

-- But not from an `at` so late that a lease from it would end past the last timestamp: 22023
-- naming `at` (it was 22008 "timestamp out of range"), by the direct claim and the statement
-- alike, before anything is changed. A take, which leases nothing, may claim as of then; the
-- last `at` allowed leases for a full day.
\i sql/include/try.sql
SELECT count(hopper.queue_push('lc_plain', '{}', kind => 'k')) FROM generate_series(1, 3);
SELECT pg_temp.try($$SELECT * FROM hopper.queue_pull('lc_plain', 1,
                       at => '294276-12-31 23:59:59+00')$$) AS last_day_direct;
SELECT pg_temp.try($$SELECT * FROM hopper.queue_pull('lc_plain', 1, kinds => ARRAY['k'],
                       at => '294276-12-31 00:00:00+00')$$) AS last_day_statement;
SELECT count(*) AS taken FROM hopper.queue_take('lc_plain', 1, at => '294276-12-31 23:59:59+00');
-- A take that comes up short rescues expired leases as of its `at`, which leases nothing either.
SELECT count(*) AS taken_short FROM hopper.queue_take('lc_plain', 100, at => '294276-12-31 23:59:59+00');
SELECT count(hopper.queue_push('lc_plain', '{}', kind => 'k')) AS pushed_again FROM generate_series(1, 2);
SELECT lease_until AT TIME ZONE 'UTC' AS last_lease_direct
FROM hopper.queue_pull('lc_plain', 1, lease => '1 day', at => '294276-12-30 23:59:59.999999+00');
SELECT lease_until AT TIME ZONE 'UTC' AS last_lease_statement
FROM hopper.queue_pull('lc_plain', 1, lease => '1 day', kinds => ARRAY['k'],
                       at => '294276-12-30 23:59:59.999999+00');

-- A pull in a transaction older than its lease: the lease runs from the real time, not from the
-- transaction's start (it was handed out already run out, and the next pull took the job over),
-- directly and through the claim statement; a heartbeat there extends from the real time too.
SELECT hopper.queue_create('lc_old') AS created;
SELECT count(hopper.queue_push('lc_old', '{}', kind => 'k')) FROM generate_series(1, 2);
BEGIN;
SELECT pg_sleep(1.5);
SELECT id AS old_direct, lease_token AS old_token, lease_until > clock_timestamp() AS direct_live
FROM hopper.queue_pull('lc_old', 1, lease => '1 second') \gset
SELECT :'direct_live' AS direct_live;
SELECT lease_until > clock_timestamp() AS statement_live
FROM hopper.queue_pull('lc_old', 1, lease => '1 second', kinds => ARRAY['k']);
SELECT pg_sleep(1.5);
SELECT hopper.queue_heartbeat(:old_direct, :old_token, '1 second') AS beat;
SELECT lease_until > clock_timestamp() AS beat_live, started_at > now() AS started_when_leased
FROM hopper.jobs WHERE id = :old_direct;
ROLLBACK;

-- A procedure that commits as it goes is one statement however long it runs: its heartbeats
-- extend from the real time too (from the statement's, each answered true and extended nothing
-- once the CALL was older than the lease, and the reaper took the job from its live worker).
SELECT hopper.queue_create('lc_proc') AS created;
SELECT hopper.queue_push('lc_proc', '{}') AS proc_job \gset
CREATE TEMP TABLE lc_beats (n int, beat boolean, live boolean);
CREATE PROCEDURE lc_beating_worker() LANGUAGE plpgsql AS $$
DECLARE
    j record;
    ok boolean;
BEGIN
    SELECT id, lease_token INTO j FROM hopper.queue_pull('lc_proc', 1, lease => '1 second');
    COMMIT;
    FOR i IN 1..3 LOOP
        PERFORM pg_sleep(0.6);
        ok := hopper.queue_heartbeat(j.id, j.lease_token, '1 second');
        INSERT INTO lc_beats
        SELECT i, ok, lease_until > clock_timestamp() FROM hopper.jobs WHERE id = j.id;
        COMMIT;
    END LOOP;
END $$;
CALL lc_beating_worker();
SELECT n, beat, live FROM lc_beats ORDER BY n;
SELECT state, attempt FROM hopper.jobs WHERE id = :proc_job;
DROP PROCEDURE lc_beating_worker();

-- A pull that comes up short rescues the leases that ran out by the real time, and takes the jobs
-- it rescued: they come back due as of its own clock (the transaction's start), not at the real
-- time, which lies after that clock (the pull rescued them, and only the next pull took them).
-- Directly and through the claim statement.
BEGIN;
SELECT count(*) AS pulled FROM hopper.queue_pull('lc_old', 2, lease => '1 millisecond');
SELECT pg_sleep(0.01);
SELECT count(*) AS rescued_and_pulled FROM hopper.queue_pull('lc_old', 1, lease => '1 millisecond');
SELECT pg_sleep(0.01);
SELECT count(*) AS rescued_and_pulled_statement
FROM hopper.queue_pull('lc_old', 2, kinds => ARRAY['k']);
-- A job the pull rescues but leaves (another kind) keeps its place: it does not come back before
-- the run_at it had.
SELECT hopper.queue_push('lc_old', '{}', kind => 'other', run_at => clock_timestamp()) AS other \gset
SELECT run_at AS other_run_at FROM hopper.jobs WHERE id = :other \gset
SELECT count(*) AS other_pulled
FROM hopper.queue_pull('lc_old', 1, lease => '1 millisecond', at => clock_timestamp());
SELECT pg_sleep(0.01);
SELECT count(*) AS left_other FROM hopper.queue_pull('lc_old', 1, kinds => ARRAY['k']);
SELECT state, run_at = :'other_run_at' AS kept_its_run_at FROM hopper.jobs WHERE id = :other;
ROLLBACK;

\c :orig
DROP DATABASE hopper_lease_clock WITH (FORCE);
DROP ROLE regress_lease_worker;
