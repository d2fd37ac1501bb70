-- Which job runs next: priority (smaller first), then run_at, then id; scheduling and time travel;
-- kinds; batches; deduplication; pause and resume.
SET hopper.notify = off;

SELECT hopper.queue_create('order') AS created;
SELECT hopper.queue_push('order', '{"n": "low"}', priority => 10) AS low \gset
SELECT hopper.queue_push('order', '{"n": "first-default"}') AS d1 \gset
SELECT hopper.queue_push('order', '{"n": "urgent"}', priority => -5) AS urgent \gset
SELECT hopper.queue_push('order', '{"n": "second-default"}') AS d2 \gset
SELECT hopper.queue_push('order', '{"n": "old"}', run_at => now() - interval '1 hour') AS old \gset
SELECT hopper.queue_push('order', '{"n": "later"}', run_at => now() + interval '1 hour') AS later \gset

SELECT payload->>'n' AS name FROM hopper.queue_pull('order', 10, lease => '3 hours');
-- The scheduled job is not due yet...
SELECT state FROM hopper.job_status(:later);
SELECT count(*) AS not_yet FROM hopper.queue_pull('order', 10);
-- ...until the clock reaches it.
SELECT payload->>'n' AS name FROM hopper.queue_pull('order', 10, at => now() + interval '61 minutes');

-- Kinds: a worker can ask for the job types it handles.
SELECT hopper.queue_create('kinds') AS created;
SELECT count(*) AS pushed FROM (
    SELECT hopper.queue_push('kinds', jsonb_build_object('i', i), kind => k)
    FROM (VALUES (1, 'email'), (2, 'sms'), (3, 'email'), (4, 'push')) v(i, k)) s;
SELECT kind, payload->>'i' AS i FROM hopper.queue_pull('kinds', 10, kinds => ARRAY['email', 'push']);
SELECT kind FROM hopper.queue_pull('kinds', 10);

-- Batches: ids come back in payload order and are ascending; a batch pull takes them in order.
SELECT hopper.queue_create('batch') AS created;
CREATE TEMP TABLE pushed AS
    SELECT row_number() OVER () AS slot, id
    FROM hopper.queue_push_batch('batch', ARRAY['{"i": 1}', '{"i": 2}', '{"i": 3}', '{"i": 4}']::jsonb[],
                                 kind => 'b', priority => 3) AS id;
SELECT count(*) AS n, bool_and(id > 0) AS ids,
       array_agg(id ORDER BY slot) = array_agg(id ORDER BY id) AS in_order
FROM pushed;
SELECT payload->>'i' AS i, kind, attempt FROM hopper.queue_pull('batch', 3);
SELECT count(*) AS rest FROM hopper.queue_pull('batch', 3);
SELECT count(*) AS empty_batch FROM hopper.queue_push_batch('batch', ARRAY[]::jsonb[]);

-- Deduplication: the same key while the first job is unfinished returns the first job.
SELECT hopper.queue_create('dedup') AS created;
SELECT hopper.queue_push('dedup', '{"v": 1}', dedup_key => 'video-7') AS first \gset
SELECT hopper.queue_push('dedup', '{"v": 2}', dedup_key => 'video-7') = :first AS same_job;
SELECT hopper.queue_push('dedup', '{"v": 3}', dedup_key => 'video-8') <> :first AS other_key;
SELECT payload FROM hopper.job_status(:first);
-- In a batch, keys align with payloads: a known key and a repeat within the batch map to one job.
CREATE TEMP TABLE dd AS
    SELECT row_number() OVER () AS slot, id
    FROM hopper.queue_push_batch('dedup', ARRAY['{"b": 1}', '{"b": 2}', '{"b": 3}', '{"b": 4}']::jsonb[],
                                 dedup_keys => ARRAY['video-7', 'video-9', NULL, 'video-9']) AS id;
SELECT slot, CASE WHEN id = :first THEN 'first' ELSE 'new' END AS which FROM dd ORDER BY slot;
SELECT (SELECT id FROM dd WHERE slot = 2) = (SELECT id FROM dd WHERE slot = 4) AS repeat_maps_to_one;
-- Once the first job finishes, the key is free again.
SELECT id AS fid, lease_token AS ftok FROM hopper.queue_pull('dedup') \gset
SELECT :fid = :first AS pulled_first;
SELECT hopper.queue_complete(:fid, :ftok) AS completed;
SELECT hopper.queue_push('dedup', '{"v": 4}', dedup_key => 'video-7') <> :first AS new_job_after_finish;

-- Pause: pushes are accepted, nothing is handed out; resume hands them out again.
SELECT hopper.queue_create('pausable') AS created;
SELECT hopper.queue_pause('pausable');
SELECT hopper.queue_push('pausable', '{}') > 0 AS pushed_while_paused;
SELECT count(*) AS pulled_while_paused FROM hopper.queue_pull('pausable', 10);
SELECT paused, available FROM hopper.queue_stats('pausable');
SELECT hopper.queue_resume('pausable');
SELECT count(*) AS pulled_after_resume FROM hopper.queue_pull('pausable', 10);

-- Purge removes waiting jobs, not running ones; drop removes the queue and its jobs.
SELECT hopper.queue_create('purgeable') AS created;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('purgeable', array_fill('{}'::jsonb, ARRAY[5]));
SELECT count(*) AS running FROM hopper.queue_pull('purgeable', 2);
SELECT hopper.queue_purge('purgeable') AS purged;
SELECT available, running FROM hopper.queue_stats('purgeable');
SELECT hopper.queue_drop('purgeable') AS dropped;
SELECT count(*) AS stats_rows FROM hopper.queue_stats() WHERE queue = 'purgeable';

-- Per-queue defaults apply to new jobs; a push can override max_attempts.
SELECT hopper.queue_create('defaults', max_attempts => 2, lease => '5 minutes') AS created;
SELECT hopper.queue_push('defaults', '{}') AS j1 \gset
SELECT hopper.queue_push('defaults', '{}', max_attempts => 9) AS j2 \gset
SELECT max_attempts FROM hopper.job_status(:j1);
SELECT max_attempts FROM hopper.job_status(:j2);
SELECT round(extract(epoch FROM lease_until - now())) AS lease_s FROM hopper.queue_pull('defaults', 1);
SELECT round(extract(epoch FROM lease_until - now())) AS lease_s FROM hopper.queue_pull('defaults', 1, lease => '42 seconds');
-- Changing settings later keeps the ones not named.
SELECT hopper.queue_create('defaults', lease => '1 minute') AS created_again;
SELECT hopper.queue_push('defaults', '{}') AS j3 \gset
SELECT max_attempts FROM hopper.job_status(:j3);
