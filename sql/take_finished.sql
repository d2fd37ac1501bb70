-- queue_fail_taken puts back only a job whose take still stands in this transaction: one that a
-- later command of the transaction finished (completed through its lease, cancelled, buried by an
-- earlier queue_fail_taken) stays finished, with its history row and result, and the call gives
-- NULL. A finished job must never run again.
--
-- In a database of its own: takes, pulls and completions go through the direct paths.
\set own_db hopper_take_finished
\i sql/include/own_database.sql
SET hopper.notify = off;
SELECT hopper.queue_create('tf') AS created;

-- The take rolled back (to a savepoint made before it); the job is then pulled and completed
-- through its lease in the same transaction.
SELECT hopper.queue_push('tf', '{"n": 1}') AS rolled_back \gset
BEGIN;
SAVEPOINT before_take;
SELECT id = :rolled_back AS took FROM hopper.queue_take('tf');
ROLLBACK TO SAVEPOINT before_take;
SELECT id = :rolled_back AS pulled, lease_token AS tok FROM hopper.queue_pull('tf') \gset
SELECT hopper.queue_complete(:rolled_back, :tok, '{"ok": 1}') AS completed;
SELECT hopper.queue_fail_taken(:rolled_back, 'late', permanent => true) AS failed_after_complete;
COMMIT;
SELECT state, attempt, result FROM hopper.job_status(:rolled_back);
SELECT count(*) AS live FROM hopper.jobs WHERE id = :rolled_back;

-- The take stands and its failure put the job back; the job is then pulled and completed in the
-- same transaction. Failing it again finds a finished job, not a taken one.
SELECT hopper.queue_push('tf', '{"n": 2}') AS put_back \gset
BEGIN;
SELECT id = :put_back AS took FROM hopper.queue_take('tf');
SAVEPOINT work;
ROLLBACK TO SAVEPOINT work;
SELECT hopper.queue_fail_taken(:put_back, 'first', retry_in => '0') AS first_failure;
SELECT id = :put_back AS pulled, lease_token AS tok FROM hopper.queue_pull('tf') \gset
SELECT hopper.queue_complete(:put_back, :tok, '{"ok": 2}') AS completed;
SELECT state, attempt, result FROM hopper.job_history WHERE id = :put_back;
SELECT hopper.queue_fail_taken(:put_back, 'second', retry_in => '0') AS failed_after_complete;
COMMIT;
SELECT state, attempt, result, last_error FROM hopper.job_status(:put_back);
SELECT count(*) AS live FROM hopper.jobs WHERE id = :put_back;

-- Put back and cancelled: it stays cancelled.
SELECT hopper.queue_push('tf', '{"n": 3}') AS cancelled \gset
BEGIN;
SELECT id = :cancelled AS took FROM hopper.queue_take('tf');
SELECT hopper.queue_fail_taken(:cancelled, 'first', retry_in => '0') AS first_failure;
SELECT hopper.queue_cancel(:cancelled) AS cancel;
SELECT hopper.queue_fail_taken(:cancelled, 'second') AS failed_after_cancel;
COMMIT;
SELECT state, attempt, last_error FROM hopper.job_status(:cancelled);

-- Buried by queue_fail_taken: a second call finds it dead, not taken, and leaves it dead with one
-- failure recorded.
SELECT hopper.queue_push('tf', '{"n": 4}') AS buried \gset
BEGIN;
SELECT id = :buried AS took FROM hopper.queue_take('tf');
SELECT hopper.queue_fail_taken(:buried, 'first', permanent => true) AS first_failure;
SELECT hopper.queue_fail_taken(:buried, 'second', permanent => true) AS failed_after_burial;
COMMIT;
SELECT state, attempt, last_error, jsonb_array_length(errors) AS errors
FROM hopper.job_status(:buried);

-- Still put back: a failure recorded in a savepoint that rolled back undid nothing of the take.
SELECT hopper.queue_push('tf', '{"n": 5}') AS undone_failure \gset
BEGIN;
SELECT id = :undone_failure AS took FROM hopper.queue_take('tf');
SAVEPOINT failing;
SELECT hopper.queue_fail_taken(:undone_failure, 'undone', permanent => true) AS undone;
ROLLBACK TO SAVEPOINT failing;
SELECT hopper.queue_fail_taken(:undone_failure, 'kept', retry_in => '0') AS kept;
COMMIT;
SELECT state, attempt, last_error FROM hopper.job_status(:undone_failure);
SELECT count(*) AS in_history FROM hopper.job_history WHERE id = :undone_failure;

-- A packed job, its take rolled back, then pulled and completed through its lease: it stays
-- completed too.
SET hopper.pack_batches = on;
SELECT hopper.queue_create('tf-packed') AS created;
SELECT min(id) AS packed FROM hopper.queue_push_batch('tf-packed',
    ARRAY['{"n": 1}', '{"n": 2}']::jsonb[]) AS t(id) \gset
RESET hopper.pack_batches;
BEGIN;
SAVEPOINT before_take;
SELECT id = :packed AS took FROM hopper.queue_take('tf-packed');
ROLLBACK TO SAVEPOINT before_take;
SELECT id = :packed AS pulled, lease_token AS tok FROM hopper.queue_pull('tf-packed') \gset
SELECT hopper.queue_complete(:packed, :tok, '{"ok": 3}') AS completed;
SELECT hopper.queue_fail_taken(:packed, 'late', permanent => true) AS failed_after_complete;
COMMIT;
SELECT state, attempt, result FROM hopper.job_status(:packed);

SELECT hopper.queue_drop('tf') AS dropped;
SELECT hopper.queue_drop('tf-packed') AS dropped;
\c :regression_db
DROP DATABASE :"own_db";
