-- Failure handling: backoff schedule, retry_in, permanent failures, dead after max attempts,
-- error history, and bringing dead or cancelled jobs back.
SET hopper.notify = off;
\i sql/include/try.sql
-- No jitter, so the backoff schedule is exact: base * 2^attempt, capped.
SELECT hopper.queue_create('retry', max_attempts => 3, backoff_base => '10 seconds',
                           backoff_cap => '30 seconds', jitter => 0) AS created;
SELECT hopper.queue_push('retry', '{"job": "flaky"}') AS id \gset

-- Attempt 1 fails: back after 10 s * 2^1 = 20 s.
SELECT lease_token AS t1, attempt FROM hopper.queue_pull('retry') \gset
SELECT hopper.queue_fail(:id, :t1, 'boom 1') AS state;
SELECT state, attempt, last_error, round(extract(epoch FROM run_at - now())) AS delay_s
FROM hopper.job_status(:id);
-- Not before its time...
SELECT count(*) AS early FROM hopper.queue_pull('retry', at => now() + interval '19 seconds');
-- ...but then.
SELECT lease_token AS t2, attempt FROM hopper.queue_pull('retry', at => now() + interval '21 seconds') \gset
SELECT :attempt AS second_attempt;
-- Attempt 2 fails: 10 s * 2^2 = 40 s, capped at 30 s.
SELECT hopper.queue_fail(:id, :t2, 'boom 2') AS state;
SELECT round(extract(epoch FROM run_at - now())) AS capped_delay_s FROM hopper.job_status(:id);
-- The old token is dead after the retry: fencing.
SELECT hopper.queue_complete(:id, :t1) AS stale_complete;
-- Attempt 3 fails: attempts used up, dead.
SELECT lease_token AS t3 FROM hopper.queue_pull('retry', at => now() + interval '31 seconds') \gset
SELECT hopper.queue_fail(:id, :t3, 'boom 3') AS state;
SELECT state, attempt, last_error, finished_at IS NOT NULL AS finished,
       jsonb_array_length(errors) AS n_errors,
       (SELECT array_agg(e->>'error' ORDER BY (e->>'attempt')::int) FROM jsonb_array_elements(errors) e) AS error_log
FROM hopper.job_status(:id);
-- Failing a dead job's old lease: stale, NULL.
SELECT hopper.queue_fail(:id, :t3, 'again') IS NULL AS stale_fail;

-- queue_retry brings it back with attempts starting over; errors are kept.
SELECT hopper.queue_retry(:id) AS retried;
SELECT state, attempt, jsonb_array_length(errors) AS n_errors FROM hopper.job_status(:id);
SELECT lease_token AS t4, attempt FROM hopper.queue_pull('retry') \gset
SELECT :attempt AS attempt_after_retry;

-- retry_in overrides the backoff; permanent goes straight to dead.
SELECT hopper.queue_fail(:id, :t4, 'rate limited', retry_in => '5 minutes') AS state;
SELECT round(extract(epoch FROM run_at - now())) AS retry_in_s FROM hopper.job_status(:id);
SELECT lease_token AS t5 FROM hopper.queue_pull('retry', at => now() + interval '6 minutes') \gset
SELECT hopper.queue_fail(:id, :t5, 'file is corrupt', permanent => true) AS state;
SELECT state, attempt, last_error FROM hopper.job_status(:id);

-- retry_in of zero: available at once.
SELECT hopper.queue_push('retry', '{"job": "now"}') AS id2 \gset
SELECT lease_token AS u1 FROM hopper.queue_pull('retry') \gset
SELECT hopper.queue_fail(:id2, :u1, 'try again now', retry_in => '0 seconds') AS state;

-- Jitter only ever shortens the delay, by at most the jitter fraction.
SELECT hopper.queue_create('jittery', backoff_base => '100 seconds', backoff_cap => '1 hour',
                           jitter => 0.5) AS created;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('jittery', array_fill('{}'::jsonb, ARRAY[50]));
-- Measured from the failure's own clock: a later statement's now() would shorten every delay.
CREATE TEMP TABLE jit AS
    SELECT p.id, hopper.queue_fail(p.id, p.lease_token, 'x') AS state, now() AS failed_at
    FROM hopper.queue_pull('jittery', 50) p;
SELECT count(*) AS failed, bool_and(state = 'scheduled') AS all_scheduled FROM jit;
SELECT min(extract(epoch FROM s.run_at - jit.failed_at)) >= 100 AS at_least_half,
       max(extract(epoch FROM s.run_at - jit.failed_at)) <= 200 AS at_most_full,
       count(DISTINCT s.run_at) > 1 AS spread
FROM jit, hopper.job_status(jit.id) s;

-- Cancel: a waiting job and a running one; the running job's holder learns at its heartbeat.
SELECT hopper.queue_push('retry', '{"job": "cancel me"}') AS c1 \gset
SELECT hopper.queue_cancel(:c1) AS cancelled;
SELECT state FROM hopper.job_status(:c1);
SELECT hopper.queue_cancel(:c1) AS cancelled_twice;
SELECT hopper.queue_push('retry', '{"job": "cancel me running"}', priority => -10) AS c2 \gset
SELECT lease_token AS ct FROM hopper.queue_pull('retry') \gset
SELECT hopper.queue_cancel(:c2) AS cancelled_running;
SELECT hopper.queue_heartbeat(:c2, :ct) AS holder_still_owns_it;
SELECT hopper.queue_complete(:c2, :ct) AS holder_completes;
SELECT hopper.queue_retry(:c2) AS retried_cancelled;
SELECT state FROM hopper.job_status(:c2);
-- A completed job cannot be retried.
SELECT lease_token AS ct2, id AS c2b FROM hopper.queue_pull('retry') \gset
SELECT hopper.queue_complete(:c2b, :ct2) AS completed;
SELECT pg_temp.try(format('SELECT hopper.queue_retry(%s)', :c2b));
-- Nor a scheduled one, which the refusal calls scheduled, as job_status does.
SELECT hopper.queue_push('retry', '{}', run_at => now() + interval '1 hour') AS later \gset
SELECT pg_temp.try(format('SELECT hopper.queue_retry(%s)', :later));
SELECT hopper.queue_cancel(:later) AS cancelled;

-- Release: back to available without spending an attempt. The claim is undone: the job keeps
-- its run_at (its place in pull order) and shows no start or worker of the claim.
SELECT hopper.queue_push('retry', '{"job": "release me"}', priority => -20) AS r1 \gset
SELECT run_at AS r1_run_at FROM hopper.jobs WHERE id = :r1 \gset
SELECT lease_token AS rt, attempt FROM hopper.queue_pull('retry', worker => 'releaser') \gset
SELECT started_at IS NOT NULL AS started, worker FROM hopper.job_status(:r1);
SELECT hopper.queue_release(:r1, :rt) AS released;
SELECT state, attempt, run_at = :'r1_run_at' AS kept_run_at, started_at, worker
FROM hopper.job_status(:r1);
SELECT hopper.queue_release(:r1, :rt) AS released_twice;

-- A cancelled job whose queue is gone (its row deleted by hand) is not put back into no queue.
SELECT hopper.queue_create('retry_gone') AS created;
SELECT hopper.queue_push('retry_gone', '{}') AS g1 \gset
SELECT hopper.queue_cancel(:g1) AS cancelled;
DELETE FROM hopper.queues WHERE name = 'retry_gone';
SELECT pg_temp.try(format('SELECT hopper.queue_retry(%s)', :g1));
SELECT count(*) AS put_back FROM hopper.jobs WHERE id = :g1;
DELETE FROM hopper.job_history WHERE queue = 'retry_gone';

-- A dead job with a dedup key cannot come back while a job pushed since holds the key: two
-- unfinished jobs never share one (23505, naming the holder); once it finished, the retry works.
SELECT hopper.queue_create('retry_key') AS created;
SELECT hopper.queue_push('retry_key', '{}', dedup_key => 'k') AS k1 \gset
SELECT hopper.queue_cancel(:k1) AS cancelled;
SELECT hopper.queue_push('retry_key', '{}', dedup_key => 'k') AS k2 \gset
SELECT regexp_replace(pg_temp.try(format('SELECT hopper.queue_retry(%s)', :k1)), 'job [0-9]+', 'job N', 'g')
    AS key_held;
SELECT state FROM hopper.job_status(:k1);
SELECT hopper.queue_cancel(:k2) AS cancelled;
SELECT hopper.queue_retry(:k1) AS retried;
SELECT state, attempt FROM hopper.job_status(:k1);
SELECT hopper.queue_drop('retry_key') AS dropped;

-- A long backoff at a late attempt is capped, not out of range: base * 2^30 of a day's base
-- passed an interval's microseconds (22008) before the cap applied, and the reaper's rescue with
-- it failed every pass.
SELECT hopper.queue_create('retry_long', max_attempts => 40, backoff_base => '24 hours',
                           backoff_cap => '1 day', jitter => 0) AS created;
SELECT hopper.queue_push('retry_long', '{}') AS l1 \gset
DO $$
DECLARE
    r record;
BEGIN
    FOR i IN 1 .. 30 LOOP
        SELECT * INTO r FROM hopper.queue_pull('retry_long');
        PERFORM hopper.queue_fail(r.id, r.lease_token, 'again', retry_in => '0');
    END LOOP;
END $$;
SELECT lease_token AS lt, attempt AS long_attempt FROM hopper.queue_pull('retry_long') \gset
SELECT :long_attempt AS long_attempt;
SELECT hopper.queue_fail(:l1, :lt, 'still failing') AS state;
SELECT round(extract(epoch FROM run_at - now())) AS long_delay_s FROM hopper.job_status(:l1);
SELECT hopper.queue_drop('retry_long') AS dropped;

-- The exponent of the backoff is not stopped at 30: a base of a millisecond at attempt 34 is
-- 2^34 ms, 198 days, capped at 30 days (it stopped at 12 days).
SELECT hopper.queue_create('retry_ms', max_attempts => 100, backoff_base => '1 millisecond',
                           backoff_cap => '30 days', jitter => 0) AS created;
SELECT hopper.queue_push('retry_ms', '{}') AS m1 \gset
SELECT lease_token AS mt FROM hopper.queue_pull('retry_ms') \gset
UPDATE hopper.jobs SET attempt = 34 WHERE id = :m1;
SELECT hopper.queue_fail(:m1, :mt, 'late') AS state;
SELECT round(extract(epoch FROM run_at - now()) / 86400) AS ms_delay_days FROM hopper.job_status(:m1);
SELECT hopper.queue_drop('retry_ms') AS dropped;

-- A long error text is kept clipped to 16 kB with its length: twenty errors of 15 MB passed
-- jsonb's size limit, and the job could then be neither failed nor rescued.
SELECT hopper.queue_create('retry_big', max_attempts => 3) AS created;
SELECT hopper.queue_push('retry_big', '{}') AS b1 \gset
SELECT lease_token AS bt FROM hopper.queue_pull('retry_big') \gset
SELECT hopper.queue_fail(:b1, :bt, repeat('é', 100000), retry_in => '0') AS state;
SELECT octet_length(last_error) AS kept_bytes, right(last_error, 30) AS ending,
       octet_length(errors->0->>'error') AS logged_bytes
FROM hopper.jobs WHERE id = :b1;
BEGIN;
SELECT count(*) AS taken FROM hopper.queue_take('retry_big', 1);
SELECT hopper.queue_fail_taken(:b1, repeat('x', 20000), retry_in => '0') AS state;
COMMIT;
SELECT octet_length(last_error) AS kept_bytes, right(last_error, 29) AS ending
FROM hopper.jobs WHERE id = :b1;
SELECT hopper.queue_drop('retry_big') AS dropped;

-- errors written by hand as something other than an array: a failure or rescue starts a new
-- array (jsonb_array_length of a scalar failed the rescue, the pull with it, and every reaper
-- pass of the database).
SELECT hopper.queue_create('retry_poison') AS created;
INSERT INTO hopper.jobs (queue, state, run_at, max_attempts, created_at, payload, errors,
                         lease_until, lease_token, attempt)
VALUES ('retry_poison', 'running', now(), 5, now(), '{}', '"poison"', now() - interval '1 s', -1, 1)
RETURNING id AS poisoned \gset
SELECT count(*) >= 0 AS pulled FROM hopper.queue_pull('retry_poison', 1);
SELECT jsonb_typeof(errors) AS errors_type, jsonb_array_length(errors) AS entries,
       errors->0->>'error' LIKE 'lease expired%' AS rescued
FROM hopper.jobs WHERE id = :poisoned;
SELECT hopper.queue_drop('retry_poison') AS dropped;

-- The backoff counts from the failure, not from the start of the transaction (or statement) that
-- failed the job: a take's work may run longer than the backoff, and its job came back due at once
-- (a repeated queue_fail_taken in a later transaction then found it due and counted a second
-- attempt); a procedure that commits as it goes is one statement however long it runs.
SELECT hopper.queue_create('retry_clock', max_attempts => 5) AS created;
SELECT hopper.queue_push('retry_clock', '{}') AS c1 \gset
BEGIN;
SELECT count(*) AS taken FROM hopper.queue_take('retry_clock', 1);
SELECT pg_sleep(0.1);
SELECT statement_timestamp() AS before_fail,
       hopper.queue_fail_taken(:c1, 'boom', retry_in => '1 min') AS state,
       clock_timestamp() AS after_fail \gset
COMMIT;
SELECT :'state' AS state,
       run_at BETWEEN :'before_fail'::timestamptz + interval '1 min'
                  AND :'after_fail'::timestamptz + interval '1 min' AS from_failure
FROM hopper.jobs WHERE id = :c1;
UPDATE hopper.jobs SET run_at = now() WHERE id = :c1;
BEGIN;
SELECT lease_token AS ct FROM hopper.queue_pull('retry_clock') \gset
SELECT pg_sleep(0.1);
SELECT statement_timestamp() AS before_fail,
       hopper.queue_fail(:c1, :ct, 'boom', retry_in => '1 min') AS state,
       clock_timestamp() AS after_fail \gset
COMMIT;
SELECT :'state' AS state,
       run_at BETWEEN :'before_fail'::timestamptz + interval '1 min'
                  AND :'after_fail'::timestamptz + interval '1 min' AS from_failure
FROM hopper.jobs WHERE id = :c1;
UPDATE hopper.jobs SET run_at = now() WHERE id = :c1;
CREATE PROCEDURE retry_clock_proc(job bigint) LANGUAGE plpgsql AS $$
DECLARE
    tok bigint;
BEGIN
    SELECT lease_token INTO tok FROM hopper.queue_pull('retry_clock');
    COMMIT;
    PERFORM pg_sleep(0.2);
    PERFORM hopper.queue_fail(job, tok, 'boom', retry_in => '1 min');
    COMMIT;
END $$;
SELECT clock_timestamp() AS before_call \gset
CALL retry_clock_proc(:c1);
SELECT state, run_at >= :'before_call'::timestamptz + interval '1 min 0.2 s' AS from_failure
FROM hopper.job_status(:c1);
DROP PROCEDURE retry_clock_proc(bigint);
SELECT hopper.queue_drop('retry_clock') AS dropped;
