-- Leases and fencing: an expired lease can be taken over by another worker even with no reaper,
-- and the old holder can then change nothing.
SET hopper.notify = off;
SELECT hopper.queue_create('fence', max_attempts => 2) AS created;
SELECT hopper.queue_push('fence', '{"task": "slow"}') AS id \gset
SELECT lease_token AS old_token FROM hopper.queue_pull('fence', 1, lease => '10 seconds', worker => 'old') \gset

-- Before the lease ends nobody else gets it.
SELECT count(*) AS taken_early FROM hopper.queue_pull('fence', 1, at => now() + interval '9 seconds');
-- After it ends, the next pull takes it over: a new attempt under a new token.
SELECT lease_token AS new_token, attempt FROM hopper.queue_pull('fence', 1, worker => 'new',
                                                                at => now() + interval '11 seconds') \gset
SELECT :new_token <> :old_token AS new_token, :attempt AS attempt;
SELECT worker, last_error, errors->0->>'error' AS logged FROM hopper.job_status(:id);

-- The old holder is fenced off from every lease operation.
SELECT hopper.queue_heartbeat(:id, :old_token) AS old_heartbeat,
       hopper.queue_progress(:id, :old_token, 0.9) AS old_progress,
       hopper.queue_complete(:id, :old_token) AS old_complete,
       hopper.queue_fail(:id, :old_token, 'x') IS NULL AS old_fail_is_null,
       hopper.queue_release(:id, :old_token) AS old_release;
SELECT state, worker, progress FROM hopper.job_status(:id);
SELECT hopper.queue_complete(:id, :new_token, '{"by": "new"}') AS new_complete;
SELECT state, result FROM hopper.job_status(:id);

-- An expired lease on the last attempt is not handed out again: the job is dead.
SELECT hopper.queue_push('fence', '{"task": "doomed"}') AS d \gset
SELECT count(*) FROM hopper.queue_pull('fence', 1, lease => '1 second');
SELECT count(*) FROM hopper.queue_pull('fence', 1, lease => '1 second', at => now() + interval '2 seconds');
SELECT count(*) AS handed_out FROM hopper.queue_pull('fence', 1, at => now() + interval '4 seconds');
SELECT state, attempt, last_error FROM hopper.job_status(:d);
