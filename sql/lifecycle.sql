-- The full lifecycle of one job: push, pull, progress, heartbeat, complete, history.
SET hopper.notify = off;

SELECT hopper.queue_create('emails') AS created;
SELECT hopper.queue_create('emails') AS created_again;

SELECT hopper.queue_push('emails', '{"to": "a@example.com"}', kind => 'welcome') AS id \gset
SELECT state, attempt, max_attempts, kind, payload FROM hopper.job_status(:id);

SELECT id AS pulled_id, lease_token AS token, queue, kind, attempt,
       lease_until > now() AS leased
FROM hopper.queue_pull('emails', 1, worker => 'w1') \gset
SELECT :pulled_id = :id AS same_job, :'queue' AS queue, :'kind' AS kind, :attempt AS attempt,
       :'leased' AS leased;

SELECT state, worker, attempt, started_at IS NOT NULL AS started FROM hopper.job_status(:id);
SELECT hopper.queue_progress(:id, :token, 0.5, '{"step": "render"}') AS progressed;
SELECT progress, progress_detail FROM hopper.job_status(:id);
SELECT hopper.queue_heartbeat(:id, :token, '1 hour') AS alive;
-- The extended lease holds 59 minutes from now: nobody can take the job over.
SELECT count(*) AS nothing FROM hopper.queue_pull('emails', 10, at => now() + interval '59 minutes');
-- A heartbeat without extend (the queue's lease, 30 s) does not cut that hour short.
SELECT hopper.queue_heartbeat(:id, :token) AS alive;
SELECT lease_until > now() + interval '59 minutes' AS hour_kept FROM hopper.jobs WHERE id = :id;

SELECT hopper.queue_complete(:id, :token, '{"sent": true}') AS completed;
SELECT state, result, progress, finished_at IS NOT NULL AS finished FROM hopper.job_status(:id);

-- Completing twice: the lease is gone, so it is the normal "you lost this job" answer.
SELECT hopper.queue_complete(:id, :token) AS completed_twice;

SELECT queue, available, scheduled, running, completed, dead, cancelled, paused
FROM hopper.queue_stats('emails');
