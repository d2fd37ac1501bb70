-- queue_take: jobs finished in the caller's transaction, held by its row locks. Taken jobs come
-- in pull order, are completed when the transaction commits and untouched when it rolls back.
SET hopper.notify = off;
\i sql/include/try.sql

SELECT hopper.queue_create('take') AS created;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('take',
    ARRAY['{"n": 1}', '{"n": 2}']::jsonb[], priority => 5);
SELECT hopper.queue_push('take', '{"n": 3}', priority => 1) AS urgent \gset

-- Pull order: the urgent job first; attempt counts this run; no lease is handed out.
BEGIN;
SELECT payload->>'n' AS n, attempt, id = :urgent AS is_urgent
FROM hopper.queue_take('take', 2, worker => 'taker-1');
-- Inside the transaction the jobs are already gone from the hot table and recorded.
SELECT count(*) AS live FROM hopper.jobs WHERE queue = 'take';
COMMIT;
SELECT payload->>'n' AS n, state, attempt, worker, started_at IS NOT NULL AS started,
       finished_at IS NOT NULL AS finished, progress
FROM hopper.job_history WHERE queue = 'take' ORDER BY id;
SELECT state AS urgent_state FROM hopper.job_status(:urgent);
SELECT available, running FROM hopper.queue_stats('take');

-- A rollback leaves the job as it was: available, no attempt counted, nothing in history.
BEGIN;
SELECT payload->>'n' AS n FROM hopper.queue_take('take');
ROLLBACK;
SELECT payload->>'n' AS n, state, attempt FROM hopper.jobs WHERE queue = 'take';
-- So does a rollback to a savepoint; the same transaction may then take it again.
BEGIN;
SAVEPOINT work;
SELECT payload->>'n' AS n FROM hopper.queue_take('take');
ROLLBACK TO SAVEPOINT work;
SELECT count(*) AS live_after_savepoint FROM hopper.jobs WHERE queue = 'take';
SELECT payload->>'n' AS n FROM hopper.queue_take('take');
COMMIT;
SELECT count(*) AS live, (SELECT count(*) FROM hopper.job_history WHERE queue = 'take') AS kept
FROM hopper.jobs WHERE queue = 'take';
-- An empty queue gives an empty set.
SELECT count(*) AS from_empty FROM hopper.queue_take('take', 10);

-- Only due jobs; `at` moves the clock. kinds filters as in queue_pull.
SELECT hopper.queue_push('take', '{"n": 4}', run_at => now() + interval '1 hour') AS later \gset
SELECT hopper.queue_push('take', '{"n": 5}', kind => 'mail') AS mail \gset
SELECT payload->>'n' AS n FROM hopper.queue_take('take', 10, kinds => ARRAY['sms']);
SELECT payload->>'n' AS n FROM hopper.queue_take('take', 10, kinds => ARRAY['mail']);
SELECT count(*) AS before_due FROM hopper.queue_take('take', 10);
SELECT payload->>'n' AS n FROM hopper.queue_take('take', 10, at => now() + interval '2 hours');
SELECT hopper.queue_push('take', '{"n": 41}', kind => 'late', run_at => now() + interval '1 hour')
    AS later_kind \gset
SELECT payload->>'n' AS n
FROM hopper.queue_take('take', 10, kinds => ARRAY['late'], at => now() + interval '2 hours');
-- Dated ahead, the takes (straight through the table, and the statement a kinds filter uses) found
-- the jobs due by then, but did not start them in the future: no start after its finish.
SELECT id = :later AS direct, started_at <= clock_timestamp() AS started_by_now,
       started_at <= finished_at AS started_before_finished
FROM hopper.job_history WHERE id IN (:later, :later_kind) ORDER BY id;

-- A job whose lease expired is rescued and taken, as queue_pull would claim it.
SELECT hopper.queue_push('take', '{"n": 6}') AS stuck \gset
SELECT lease_token AS stuck_tok FROM hopper.queue_pull('take', 1, lease => '1 second') \gset
SELECT payload->>'n' AS n, attempt
FROM hopper.queue_take('take', 1, at => now() + interval '1 minute');
SELECT hopper.queue_complete(:stuck, :stuck_tok) AS old_holder_completes;
SELECT state, attempt FROM hopper.job_history WHERE id = :stuck;

-- A paused queue gives nothing.
SELECT hopper.queue_push('take', '{"n": 7}') AS paused_job \gset
SELECT hopper.queue_pause('take');
SELECT count(*) AS while_paused FROM hopper.queue_take('take', 10);
SELECT hopper.queue_resume('take');
SELECT payload->>'n' AS n FROM hopper.queue_take('take');

-- A dedup key is free again once the taking transaction commits.
SELECT hopper.queue_push('take', '{"n": 8}', dedup_key => 'k') AS keyed \gset
SELECT hopper.queue_push('take', '{"n": 9}', dedup_key => 'k') = :keyed AS deduplicated;
SELECT count(*) AS taken FROM hopper.queue_take('take');
SELECT hopper.queue_push('take', '{"n": 10}', dedup_key => 'k') <> :keyed AS new_job;
SELECT payload->>'n' AS n FROM hopper.queue_take('take', 10);

-- A failed take: roll back (here to a savepoint made before the take), then record the failure.
-- The attempt counts and the retry waits for the queue's backoff; attempts used up: dead.
SELECT hopper.queue_create('take-fail', max_attempts => 2) AS created;
SELECT hopper.queue_push('take-fail', '{"n": 1}') AS failing \gset
BEGIN;
SAVEPOINT take;
SELECT payload->>'n' AS n, attempt FROM hopper.queue_take('take-fail');
ROLLBACK TO SAVEPOINT take;
SELECT hopper.queue_fail_taken(:failing, 'smtp timeout', worker => 'taker-2') AS first_failure;
COMMIT;
SELECT state, attempt, worker, last_error, run_at > now() AS waits,
       errors->0->>'error' AS error, errors->0->>'attempt' AS error_attempt,
       errors->0->>'worker' AS error_worker
FROM hopper.jobs WHERE id = :failing;
SELECT count(*) AS while_backing_off FROM hopper.queue_take('take-fail');
-- Nor is it failed again: no take can have taken it since (sql/fail_taken_repeat.sql).
SELECT hopper.queue_fail_taken(:failing, 'smtp timeout') IS NULL AS backing_off_gives_null;
-- Taken once due (here by a take dated past the backoff), the last attempt's failure buries it.
BEGIN;
SELECT attempt AS taken_late FROM hopper.queue_take('take-fail', at => now() + interval '1 day');
SELECT hopper.queue_fail_taken(:failing, 'smtp timeout again', retry_in => '0') AS second_failure;
COMMIT;
SELECT state, attempt, last_error, jsonb_array_length(errors) AS errors
FROM hopper.job_history WHERE id = :failing;
-- permanent buries at once. A job no longer available (finished) gives NULL.
SELECT hopper.queue_push('take-fail', '{"n": 2}') AS bad_input \gset
SELECT hopper.queue_fail_taken(:bad_input, 'unparseable', permanent => true) AS permanent;
SELECT state, attempt FROM hopper.job_history WHERE id = :bad_input;
SELECT hopper.queue_fail_taken(:bad_input, 'late') IS NULL AS finished_gives_null;
-- A running job belongs to its lease: queue_fail_taken leaves it alone.
SELECT hopper.queue_push('take-fail', '{"n": 3}') AS leased \gset
SELECT count(*) AS pulled FROM hopper.queue_pull('take-fail');
SELECT hopper.queue_fail_taken(:leased, 'not mine') IS NULL AS leased_gives_null;
SELECT state, attempt, last_error FROM hopper.jobs WHERE id = :leased;
-- With retention 0 a buried job is deleted, as any finished job of that queue.
SELECT hopper.queue_create('take-fail-forget', retention => '0') AS created;
SELECT hopper.queue_push('take-fail-forget', '{"n": 1}') AS unkept \gset
SELECT hopper.queue_fail_taken(:unkept, 'gone', permanent => true) AS unkept_state;
SELECT (SELECT count(*) FROM hopper.jobs WHERE id = :unkept) AS live,
       (SELECT count(*) FROM hopper.job_history WHERE id = :unkept) AS kept;

-- Failing in the taking transaction: roll back to a savepoint made after the take (the work is
-- undone, the take is not) and record the failure there. The job goes back with its attempt
-- counted and never leaves the taker's hands; the other jobs of the take commit as completed.
SELECT hopper.queue_create('take-here') AS created;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('take-here',
    ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[]);
CREATE TABLE take_work (n int);
BEGIN;
SELECT payload->>'n' AS n, attempt FROM hopper.queue_take('take-here', 3);
INSERT INTO take_work VALUES (1);
SAVEPOINT work;
INSERT INTO take_work VALUES (2);
ROLLBACK TO SAVEPOINT work;
SELECT hopper.queue_fail_taken(id, 'job 2 broke', worker => 'taker-3') AS failed_here
FROM hopper.job_history WHERE queue = 'take-here' AND payload->>'n' = '2';
INSERT INTO take_work VALUES (3);
COMMIT;
SELECT n FROM take_work ORDER BY n;
SELECT payload->>'n' AS n, state, attempt, last_error, worker, run_at > now() AS waits
FROM hopper.jobs WHERE queue = 'take-here';
SELECT payload->>'n' AS n, state, attempt FROM hopper.job_history WHERE queue = 'take-here'
ORDER BY n;
-- A waiting job taken by a take dated past its backoff, and failed with retry_in => '0'; then
-- taken and failed twice more in one transaction, the newest version comes back each time.
SELECT id AS here FROM hopper.jobs WHERE queue = 'take-here' \gset
BEGIN;
SELECT attempt AS taken_late FROM hopper.queue_take('take-here', at => now() + interval '1 day');
SELECT hopper.queue_fail_taken(:here, 'backoff skipped', retry_in => '0') AS made_available;
SELECT attempt AS taken_attempt FROM hopper.queue_take('take-here');
SAVEPOINT work;
ROLLBACK TO SAVEPOINT work;
SELECT hopper.queue_fail_taken(:here, 'third', retry_in => '0') AS third;
SELECT attempt AS taken_again FROM hopper.queue_take('take-here');
SELECT hopper.queue_fail_taken(:here, 'fourth', permanent => true) AS fourth;
COMMIT;
SELECT state, attempt, last_error, jsonb_array_length(errors) AS errors
FROM hopper.job_history WHERE id = :here;
SELECT count(*) AS live FROM hopper.jobs WHERE id = :here;
-- Retention 0: no history row to remove; the job still comes back.
SELECT hopper.queue_push('take-fail-forget', '{"n": 2}') AS unkept_here \gset
BEGIN;
SELECT count(*) AS taken FROM hopper.queue_take('take-fail-forget');
SELECT hopper.queue_fail_taken(:unkept_here, 'no history', retry_in => '0') AS unkept_here_state;
COMMIT;
SELECT state, attempt, last_error FROM hopper.jobs WHERE id = :unkept_here;
-- A job this transaction finished through its lease is not put back.
SELECT hopper.queue_push('take-here', '{"n": 4}') AS lease_done \gset
BEGIN;
SELECT hopper.queue_complete(id, lease_token) AS completed FROM hopper.queue_pull('take-here');
SELECT hopper.queue_fail_taken(:lease_done, 'not taken') IS NULL AS lease_finished_gives_null;
COMMIT;
SELECT state, attempt FROM hopper.job_history WHERE id = :lease_done;
-- Put back in a savepoint, taken again there, and that savepoint rolled back: the first take
-- holds the job again, and a failure recorded now puts it back as that take left it.
SELECT hopper.queue_push('take-again', '{"n": 1}') AS retaken \gset
BEGIN;
SELECT attempt AS first_take FROM hopper.queue_take('take-again');
SAVEPOINT again;
SELECT hopper.queue_fail_taken(:retaken, 'undone', retry_in => '0') AS failed_in_savepoint;
SELECT attempt AS second_take FROM hopper.queue_take('take-again');
ROLLBACK TO SAVEPOINT again;
SELECT hopper.queue_fail_taken(:retaken, 'kept', retry_in => '0') AS failed_after_rollback;
COMMIT;
SELECT state, attempt, last_error, jsonb_array_length(errors) AS errors
FROM hopper.jobs WHERE id = :retaken;
-- The job's dedup key pushed again after the take: a new job holds it, and two unfinished jobs
-- never share one. The failure is refused (23505, naming that job), as queue_retry refuses.
SELECT hopper.queue_push('take-key', '{"n": 1}', dedup_key => 'dk') AS keyed_here \gset
BEGIN;
SELECT id = :keyed_here AS took_keyed FROM hopper.queue_take('take-key');
SELECT hopper.queue_push('take-key', '{"n": 2}', dedup_key => 'dk') AS keyed_again \gset
SAVEPOINT fail;
SELECT replace(pg_temp.try(format('SELECT hopper.queue_fail_taken(%s, %L)', :keyed_here, 'err')),
               :keyed_again::text, 'K') AS key_pushed_again;
ROLLBACK TO SAVEPOINT fail;
COMMIT;
SELECT payload->>'n' AS n, state, attempt, id = :keyed_again AS is_new_job
FROM hopper.jobs WHERE queue = 'take-key';
SELECT state, attempt FROM hopper.job_history WHERE id = :keyed_here;

-- A queue that keeps no history deletes taken jobs outright.
SELECT hopper.queue_create('take-forget', retention => '0') AS created;
SELECT hopper.queue_push('take-forget', '{"n": 1}') AS forgotten \gset
SELECT count(*) AS taken FROM hopper.queue_take('take-forget');
SELECT (SELECT count(*) FROM hopper.jobs WHERE id = :forgotten) AS live,
       (SELECT count(*) FROM hopper.job_history WHERE id = :forgotten) AS kept;

-- A queue with limits is refused (a taken job never counts as running), and nothing is taken.
SELECT hopper.queue_create('take-limited') AS created;
SELECT hopper.queue_push('take-limited', '{"n": 1}') AS limited_job \gset
SELECT hopper.queue_set_concurrency('take-limited', 2, NULL);
SELECT pg_temp.try($$SELECT * FROM hopper.queue_take('take-limited')$$) AS limited;
SELECT state FROM hopper.jobs WHERE id = :limited_job;

-- Bad input.
SELECT pg_temp.try($$SELECT * FROM hopper.queue_take(NULL)$$) AS null_queue;
SELECT pg_temp.try($$SELECT * FROM hopper.queue_take('has space')$$) AS bad_name;
SELECT pg_temp.try($$SELECT * FROM hopper.queue_take('take', NULL)$$) AS null_n;
SELECT pg_temp.try($$SELECT * FROM hopper.queue_take('take', 0)$$) AS zero_n;
SELECT pg_temp.try($$SELECT * FROM hopper.queue_take('take', 100000)$$) AS above_cap;
SELECT pg_temp.try($$SELECT * FROM hopper.queue_take('take', 1, worker => '')$$) AS empty_worker;
SELECT pg_temp.try($$SELECT * FROM hopper.queue_take('take', 1, at => 'infinity')$$) AS inf_at;
SELECT pg_temp.try($$SELECT hopper.queue_fail_taken(NULL, 'e')$$) AS fail_null_id;
SELECT pg_temp.try($$SELECT hopper.queue_fail_taken(987654321, 'e')$$) AS fail_unknown_id;
SELECT pg_temp.try($$SELECT hopper.queue_fail_taken(1, 'e', retry_in => '-1 second')$$)
    AS fail_negative_retry;
SELECT pg_temp.try($$SELECT hopper.queue_fail_taken(1, 'e', worker => '')$$) AS fail_empty_worker;
SELECT count(*) AS unknown_queue FROM hopper.queue_take('no-such-queue');
SELECT count(*) AS created_by_mistake FROM hopper.queues WHERE name = 'no-such-queue';

-- Workers may take; producers may not.
CREATE ROLE regress_hopper_taker;
GRANT hopper_worker TO regress_hopper_taker;
CREATE ROLE regress_hopper_take_app;
GRANT hopper_producer TO regress_hopper_take_app;
GRANT EXECUTE ON FUNCTION pg_temp.try(text) TO regress_hopper_taker, regress_hopper_take_app;
SELECT hopper.queue_push('take', '{"n": 11}') AS for_worker \gset
SELECT hopper.queue_push('take', '{"n": 12}') AS worker_fails \gset
SET ROLE regress_hopper_take_app;
SELECT pg_temp.try($$SELECT * FROM hopper.queue_take('take')$$) AS producer_takes;
SELECT pg_temp.try($$SELECT hopper.queue_fail_taken(1, 'e')$$) AS producer_fails;
SET ROLE regress_hopper_taker;
SELECT pg_temp.try($$SELECT * FROM hopper.queue_take('take')$$) AS worker_takes;
-- and fail in the taking transaction.
BEGIN;
SELECT count(*) AS taken FROM hopper.queue_take('take');
SELECT hopper.queue_fail_taken(:worker_fails, 'worker failed it') AS worker_failed;
COMMIT;
RESET ROLE;
SELECT state, attempt, last_error FROM hopper.jobs WHERE id = :worker_fails;
SELECT state FROM hopper.job_history WHERE id = :for_worker;
REVOKE EXECUTE ON FUNCTION pg_temp.try(text) FROM regress_hopper_taker, regress_hopper_take_app;
DROP ROLE regress_hopper_taker;
DROP ROLE regress_hopper_take_app;

-- A take of more jobs than the history writer holds back (64 rows): each one is recorded, with its
-- own payload, by the time the call returns.
SELECT hopper.queue_create('take-many') AS created;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('take-many',
    ARRAY(SELECT pg_catalog.jsonb_build_object('n', g) FROM generate_series(1, 100) g));
BEGIN;
CREATE TEMP TABLE taken_many AS SELECT id, payload FROM hopper.queue_take('take-many', 100);
SELECT count(*) AS taken,
       (SELECT count(*) FROM hopper.job_history h JOIN taken_many t USING (id)
        WHERE h.payload = t.payload AND h.state = 'completed') AS recorded
FROM taken_many;
COMMIT;
SELECT count(DISTINCT payload->>'n') AS distinct_payloads FROM hopper.job_history
WHERE queue = 'take-many';
