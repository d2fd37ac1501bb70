-- Packed batches: the waiting jobs of hopper.job_batches rows read, list, count, cancel and purge as
-- the freshly pushed jobs they stand for.
SET hopper.pack_batches = on;
SET hopper.notify = off;
\i sql/include/try.sql

SELECT hopper.queue_create('packed') AS created;
SELECT hopper.queue_create('packed_plain') AS created;
SELECT count(*) AS rows_before FROM hopper.job_batches \gset

-- 250 jobs: three packed rows (100, 100, 50), no row of hopper.jobs. Payload n goes with the n-th id.
SELECT min(id) AS first, max(id) AS last, count(*) AS pushed
FROM hopper.queue_push_batch('packed',
    ARRAY(SELECT pg_catalog.jsonb_build_object('n', g) FROM generate_series(1, 250) g),
    priority => 3, kind => 'pk', max_attempts => 7) AS id \gset
SELECT :pushed AS pushed, :last - :first AS last_minus_first;
SELECT first_id - :first AS rel_first, last_id - :first AS rel_last, cardinality(ids) AS jobs,
       taken, priority, kind, max_attempts
FROM hopper.job_batches WHERE queue = 'packed' ORDER BY first_id;
SELECT count(*) - :rows_before AS new_packed_rows FROM hopper.job_batches;
SELECT count(*) AS ordinary_rows FROM hopper.jobs WHERE queue = 'packed';

-- job_status: the first and last job of each row, and one in the middle.
SELECT v.rel AS rel_id, s.id - :first AS status_rel_id, s.queue, s.kind, s.state, s.attempt,
       s.max_attempts, s.priority, s.payload, s.run_at = s.created_at AS due_at_push
FROM (VALUES (0), (99), (100), (150), (199), (200), (249)) v(rel),
     LATERAL hopper.job_status(:first + v.rel) s
ORDER BY v.rel;
-- Every other column is what a job pushed one row per job shows.
SET hopper.pack_batches = off;
SELECT min(id) AS plain FROM hopper.queue_push_batch('packed_plain', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[],
    priority => 3, kind => 'pk', max_attempts => 7) AS id \gset
SET hopper.pack_batches = on;
SELECT to_jsonb(p) - '{id,queue,run_at,created_at}'::text[]
       = to_jsonb(o) - '{id,queue,run_at,created_at}'::text[] AS same_as_plain,
       to_jsonb(p) - '{id,queue,run_at,created_at,payload}'::text[] AS packed_columns
FROM hopper.job_status(:first) p, hopper.job_status(:plain) o;

-- queue_stats counts them as available, and the oldest of them sets oldest_available_age, also
-- next to an ordinary job pushed later (the age is taken at a time during the statement).
SELECT run_at AS packed_run_at FROM hopper.job_status(:first) \gset
SELECT hopper.queue_push('packed', '{"n": "single"}') AS single \gset
SELECT queue, available, scheduled, running, completed, dead, cancelled, paused,
       oldest_available_age BETWEEN statement_timestamp() - :'packed_run_at'::timestamptz
           AND clock_timestamp() - :'packed_run_at'::timestamptz AS oldest_is_packed
FROM hopper.queue_stats('packed');
-- All queues at once: the same counts (packed_plain's oldest job is its own, pushed later).
SELECT queue, available, scheduled, running, cancelled,
       oldest_available_age BETWEEN statement_timestamp() - :'packed_run_at'::timestamptz
           AND clock_timestamp() - :'packed_run_at'::timestamptz AS oldest_is_packed
FROM hopper.queue_stats() WHERE queue LIKE 'packed%' ORDER BY queue;

-- queue_jobs: newest first across ordinary and packed jobs, with the state filter and the limit.
SELECT id - :first AS rel_id, state, kind, attempt, payload FROM hopper.queue_jobs('packed', lim => 4);
SELECT count(*) AS listed, min(id) - :first AS rel_min, max(id) - :first AS rel_max,
       count(*) FILTER (WHERE payload ->> 'n' = (id - :first + 1)::text) AS payload_matches_id
FROM hopper.queue_jobs('packed', lim => 1000) WHERE id <> :single;
SELECT count(*) AS available FROM hopper.queue_jobs('packed', 'available', 1000);
SELECT count(*) AS scheduled FROM hopper.queue_jobs('packed', 'scheduled', 1000);
SELECT count(*) AS running FROM hopper.queue_jobs('packed', 'running', 1000);
SELECT count(*) AS other_queue FROM hopper.queue_jobs('packed_plain', lim => 1000);

-- A row whose front jobs a claim has taken (they would be running in hopper.jobs): only the
-- jobs past them are waiting, in every reading and in purge's count.
BEGIN;
UPDATE hopper.job_batches SET taken = 10 WHERE first_id = :first;
SELECT pg_temp.try(format('SELECT hopper.job_status(%s)', :first + 9)) AS taken_job;
SELECT id - :first AS rel_id, state, payload FROM hopper.job_status(:first + 10);
SELECT available FROM hopper.queue_stats('packed');
SELECT count(*) AS listed, min(id) - :first AS rel_min
FROM hopper.queue_jobs('packed', lim => 1000) WHERE id <> :single;
SELECT hopper.queue_purge('packed') AS purged;
ROLLBACK;

-- Paths that look one job up by id know a packed job is there and waiting.
SELECT pg_temp.try(format('SELECT hopper.queue_retry(%s)', :first + 5)) AS retry;
SELECT hopper.queue_complete(:first + 5, 12345) AS completed_without_lease;
SELECT hopper.queue_heartbeat(:first + 5, 12345) AS heartbeat_without_lease;

-- Cancel: the job's row becomes ordinary rows first; its neighbours stay available.
SELECT hopper.queue_cancel(:first + 150) AS cancelled;
SELECT id - :first AS rel_id, state, attempt, payload, finished_at IS NOT NULL AS finished
FROM hopper.job_status(:first + 150);
SELECT v.rel AS rel_id, s.state, s.payload
FROM (VALUES (100), (149), (151), (199)) v(rel), LATERAL hopper.job_status(:first + v.rel) s
ORDER BY v.rel;
SELECT first_id - :first AS rel_first, cardinality(ids) AS jobs
FROM hopper.job_batches WHERE queue = 'packed' ORDER BY first_id;
SELECT count(*) AS ordinary_available FROM hopper.jobs WHERE queue = 'packed' AND state = 'available';
SELECT available, cancelled FROM hopper.queue_stats('packed');
SELECT id - :first AS rel_id, state FROM hopper.queue_jobs('packed', 'cancelled');
SELECT hopper.queue_cancel(:first + 150) AS cancelled_again;
-- A job still in a packed row, in the first row.
SELECT hopper.queue_cancel(:first) AS cancelled_first;
SELECT v.rel AS rel_id, s.state FROM (VALUES (0), (1), (99)) v(rel),
     LATERAL hopper.job_status(:first + v.rel) s ORDER BY v.rel;
SELECT count(*) AS packed_rows FROM hopper.job_batches WHERE queue = 'packed';
SELECT available, cancelled FROM hopper.queue_stats('packed');

-- Purge: every waiting job, packed or not (248 left by the cancels, and the single job).
SELECT hopper.queue_purge('packed') AS purged;
SELECT count(*) AS packed_rows FROM hopper.job_batches WHERE queue = 'packed';
SELECT available, scheduled, cancelled, oldest_available_age FROM hopper.queue_stats('packed');
SELECT count(*) AS listed FROM hopper.queue_jobs('packed', 'available', 1000);
SELECT pg_temp.try(format('SELECT hopper.job_status(%s)', :first + 200)) AS purged_job;

-- Drop: the queue's packed rows go with it.
SELECT min(id) AS again FROM hopper.queue_push_batch('packed',
    ARRAY(SELECT pg_catalog.jsonb_build_object('n', g) FROM generate_series(1, 150) g)) AS id \gset
SELECT count(*) AS packed_rows FROM hopper.job_batches WHERE queue = 'packed';
SELECT available FROM hopper.queue_stats('packed');
SELECT hopper.queue_drop('packed') AS dropped;
SELECT count(*) AS packed_rows FROM hopper.job_batches WHERE queue = 'packed';
SELECT pg_temp.try(format('SELECT hopper.job_status(%s)', :again + 120)) AS dropped_job;

-- An id that never existed is still unknown.
SELECT pg_temp.try($$SELECT hopper.job_status(987654321)$$) AS unknown;
SELECT pg_temp.try($$SELECT hopper.queue_cancel(987654321)$$) AS unknown_cancel;

-- A cancel of a finished job looks in history before it looks for a packed row holding the job:
-- finding no row that holds an id walks every packed row below it.
SELECT count(*) AS pushed FROM hopper.queue_push_batch('packed_walk',
    ARRAY(SELECT pg_catalog.jsonb_build_object('n', g) FROM generate_series(1, 2000) g));
SELECT count(*) AS packed_rows FROM hopper.job_batches WHERE queue = 'packed_walk';
SELECT hopper.queue_push('packed_walk_done', '{}') AS done \gset
SELECT count(*) AS taken FROM hopper.queue_take('packed_walk_done', 1);
BEGIN;
SELECT pg_catalog.pg_stat_get_xact_tuples_returned('hopper.job_batches_pkey'::pg_catalog.regclass)
    + pg_catalog.pg_stat_get_xact_tuples_fetched('hopper.job_batches'::pg_catalog.regclass)
    AS packed_before \gset
SELECT hopper.queue_cancel(:done) AS cancelled;
SELECT pg_catalog.pg_stat_get_xact_tuples_returned('hopper.job_batches_pkey'::pg_catalog.regclass)
    + pg_catalog.pg_stat_get_xact_tuples_fetched('hopper.job_batches'::pg_catalog.regclass)
    - :packed_before AS packed_rows_read;
ROLLBACK;
SELECT state FROM hopper.job_status(:done);
SELECT hopper.queue_drop('packed_walk') AS dropped, hopper.queue_drop('packed_walk_done') AS dropped;

-- With the setting off a batch is a row per job, as before.
SET hopper.pack_batches = off;
SELECT count(*) AS rows_before FROM hopper.job_batches \gset
SELECT count(*) AS pushed FROM hopper.queue_push_batch('packed_plain',
    ARRAY(SELECT pg_catalog.jsonb_build_object('n', g) FROM generate_series(1, 250) g)) AS id;
SELECT count(*) = :rows_before AS no_packed_rows FROM hopper.job_batches;
SELECT count(*) AS ordinary_rows FROM hopper.jobs WHERE queue = 'packed_plain';
SELECT available FROM hopper.queue_stats('packed_plain');
SELECT hopper.queue_drop('packed_plain') AS dropped;
