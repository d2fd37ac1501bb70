-- queue_fail_taken has no token: a second call for the same failed take (a client repeating a
-- call whose reply it lost, two error handlers) must not count a second attempt, or a job would
-- be buried before its max_attempts. In the transaction that recorded the failure a repeat
-- returns NULL and changes nothing, whatever the retry_in; in a later transaction the job is
-- waiting out its backoff, not due, and is left alone the same way.
--
-- In a database of its own: takes go through the direct paths.
\set own_db hopper_fail_taken_repeat
\i sql/include/own_database.sql
SET hopper.notify = off;
-- One queue per case, so that each take finds its own job.
SELECT count(hopper.queue_create(q, max_attempts => 3)) AS created
FROM unnest(ARRAY['ftr-here', 'ftr-undone', 'ftr-forgotten', 'ftr-released', 'ftr-later']) q;
CREATE FUNCTION pg_temp.attempts(job bigint) RETURNS TABLE (state text, attempt int, errors int)
LANGUAGE sql AS $$
    SELECT state, attempt, jsonb_array_length(errors) FROM hopper.job_status(job)
$$;

-- Put back in the taking transaction (rolled back to a savepoint after the take), then repeated:
-- one attempt, one error. retry_in => '0' leaves the job due: only the transaction's memory of
-- the failure stops the repeats.
SELECT hopper.queue_push('ftr-here', '{"n": 1}') AS here \gset
BEGIN;
SELECT id = :here AS took FROM hopper.queue_take('ftr-here');
SAVEPOINT work;
ROLLBACK TO SAVEPOINT work;
SELECT hopper.queue_fail_taken(:here, 'broke', retry_in => '0') AS first;
SELECT hopper.queue_fail_taken(:here, 'broke', retry_in => '0') AS repeated;
SELECT hopper.queue_fail_taken(:here, 'broke', retry_in => '0') AS repeated_again;
SELECT hopper.queue_fail_taken(:here, 'broke', permanent => true) AS repeated_permanent;
COMMIT;
SELECT * FROM pg_temp.attempts(:here);
-- Taken again (a new attempt), its failure counts again, once.
BEGIN;
SELECT id = :here AS took_again FROM hopper.queue_take('ftr-here');
SELECT hopper.queue_fail_taken(:here, 'broke again', retry_in => '0') AS second;
SELECT hopper.queue_fail_taken(:here, 'broke again', retry_in => '0') AS repeated;
COMMIT;
SELECT * FROM pg_temp.attempts(:here);

-- The take rolled back to a savepoint made before it, then the failure recorded and repeated in
-- the same transaction.
SELECT hopper.queue_push('ftr-undone', '{"n": 2}') AS undone \gset
BEGIN;
SAVEPOINT before_take;
SELECT id = :undone AS took FROM hopper.queue_take('ftr-undone');
ROLLBACK TO SAVEPOINT before_take;
SELECT hopper.queue_fail_taken(:undone, 'broke', retry_in => '0') AS first;
SELECT hopper.queue_fail_taken(:undone, 'broke', retry_in => '0') AS repeated;
COMMIT;
SELECT * FROM pg_temp.attempts(:undone);

-- A failure undone by a rollback to a savepoint is forgotten: the next call records it.
SELECT hopper.queue_push('ftr-forgotten', '{"n": 3}') AS forgotten \gset
BEGIN;
SELECT id = :forgotten AS took FROM hopper.queue_take('ftr-forgotten');
SAVEPOINT failing;
SELECT hopper.queue_fail_taken(:forgotten, 'undone') AS undone;
ROLLBACK TO SAVEPOINT failing;
SELECT hopper.queue_fail_taken(:forgotten, 'kept') AS kept;
SELECT hopper.queue_fail_taken(:forgotten, 'kept') AS repeated;
COMMIT;
SELECT state, attempt, last_error, jsonb_array_length(errors) AS errors
FROM hopper.job_status(:forgotten);
-- One recorded in a savepoint that was released stays.
SELECT hopper.queue_push('ftr-released', '{"n": 4}') AS released \gset
BEGIN;
SELECT id = :released AS took FROM hopper.queue_take('ftr-released');
SAVEPOINT failing;
SELECT hopper.queue_fail_taken(:released, 'inner') AS inner_failure;
RELEASE SAVEPOINT failing;
SELECT hopper.queue_fail_taken(:released, 'outer') AS repeated;
COMMIT;
SELECT * FROM pg_temp.attempts(:released);

-- The take rolled back as a whole, the failure recorded afterwards: a repeat in a later
-- transaction finds the job waiting out its backoff and leaves it, where each repeat used to
-- count an attempt and the third buried the job.
SELECT hopper.queue_push('ftr-later', '{"n": 5}') AS later \gset
BEGIN;
SELECT id = :later AS took FROM hopper.queue_take('ftr-later');
ROLLBACK;
SELECT hopper.queue_fail_taken(:later, 'lost reply') AS first;
SELECT hopper.queue_fail_taken(:later, 'lost reply') AS repeated;
SELECT hopper.queue_fail_taken(:later, 'lost reply') AS repeated_again;
SELECT * FROM pg_temp.attempts(:later);

SELECT count(hopper.queue_drop(q)) AS dropped
FROM unnest(ARRAY['ftr-here', 'ftr-undone', 'ftr-forgotten', 'ftr-released', 'ftr-later']) q;
\c :regression_db
DROP DATABASE :"own_db";
