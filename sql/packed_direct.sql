-- Claims on a queue with packed jobs (hopper.pack_batches) go straight through the access methods
-- when they have no kinds filter, and through the packed claim statements when they have one.
-- Both ways must claim the same jobs in the same order and write the same rows.
SET hopper.notify = off;
SET hopper.pack_batches = on;
SELECT hopper.queue_create('pl', max_attempts => 7) AS created;

-- Ordinary rows around a packed batch in pull order: a job due since yesterday and one with a
-- better priority come first, one pushed after the batch comes after it.
SELECT hopper.queue_push('pl', '{"n": "old"}', kind => 'k', run_at => now() - interval '1 day')
    IS NOT NULL AS pushed;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('pl',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 150) g), kind => 'k');
SELECT hopper.queue_push('pl', '{"n": "urgent"}', kind => 'k', priority => -1) IS NOT NULL
    AS pushed;
SELECT hopper.queue_push('pl', '{"n": "late"}', kind => 'k') IS NOT NULL AS pushed;
SELECT count(*) AS packed_rows FROM hopper.job_batches WHERE queue = 'pl';

-- Four jobs straight, then four through the statement, in one pull order.
CREATE TEMP TABLE leased AS
SELECT 'direct' AS path, l.* FROM hopper.queue_pull('pl', 4, worker => 'w') l;
INSERT INTO leased SELECT 'statement', l.* FROM hopper.queue_pull('pl', 4, worker => 'w',
    kinds => ARRAY['k']) l;
SELECT path, payload->>'n' AS n, attempt, lease_token IS NOT NULL AS token FROM leased
ORDER BY lease_token;
-- The packed jobs' rows differ only in id, payload, token and lease end (one clock per pull).
SELECT count(*) AS packed_leased,
       count(DISTINCT (j.queue, j.state, j.priority, j.run_at, j.attempt, j.max_attempts,
                       j.claimed_pid, j.claimed_backend_start, j.session_bound, j.created_at,
                       j.kind, j.worker, j.dedup_key, j.concurrency_key, j.progress,
                       j.last_error, j.errors, j.progress_detail)) AS distinct_rows
FROM hopper.jobs j JOIN leased l USING (id) WHERE l.payload->>'n' ~ '^[0-9]+$';
SELECT state, attempt, max_attempts, claimed_pid = pg_backend_pid() AS this_backend,
       session_bound, worker, kind, lease_until > started_at AS lease_ahead
FROM hopper.jobs WHERE queue = 'pl' AND payload->>'n' = '1';
SELECT first_id = (SELECT min(id) FROM leased WHERE payload->>'n' = '1') AS first_row,
       taken, cardinality(ids) AS jobs
FROM hopper.job_batches WHERE queue = 'pl' ORDER BY first_id;

-- A pull past the end of a row empties it (deleted) and goes on into the next.
SELECT count(*) AS pulled, min((payload->>'n')::int) AS first, max((payload->>'n')::int) AS last
FROM hopper.queue_pull('pl', 100);
SELECT taken, cardinality(ids) AS jobs FROM hopper.job_batches WHERE queue = 'pl';
-- The rest of the packed jobs, then the job pushed after them; nothing is handed out twice.
SELECT count(*) AS pulled, count(*) FILTER (WHERE payload->>'n' = 'late') AS late
FROM hopper.queue_pull('pl', 100);
SELECT count(*) AS packed_rows FROM hopper.job_batches WHERE queue = 'pl';
SELECT count(*) AS jobs, count(DISTINCT payload) AS distinct_payloads,
       bool_and(state = 'running' AND attempt = 1) AS all_leased_once
FROM hopper.jobs WHERE queue = 'pl';

-- A lease taken straight is an ordinary lease: its token completes it, and a session-bound pull
-- records the session.
SELECT count(*) AS pushed FROM hopper.queue_push_batch('pl-bound',
    ARRAY['{"b": 1}', '{"b": 2}']::jsonb[]);
SELECT id AS bound_id, lease_token AS bound_token
FROM hopper.queue_pull('pl-bound', 1, session_bound => true) \gset
SELECT session_bound, claimed_pid = pg_backend_pid() AS this_backend
FROM hopper.jobs WHERE id = :bound_id;
SELECT hopper.queue_complete(:bound_id, :bound_token + 1) AS stale_token,
       hopper.queue_complete(:bound_id, :bound_token) AS completed;
SELECT state FROM hopper.job_history WHERE id = :bound_id;

-- With a trigger on hopper.job_batches the pull goes through the statement, and the trigger
-- fires for the row it moves.
CREATE TABLE pl_log (op text);
CREATE FUNCTION pg_temp.log_batch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pl_log VALUES (TG_OP);
    RETURN NULL;
END $$;
CREATE TRIGGER pl_batch_log AFTER UPDATE OR DELETE ON hopper.job_batches
    FOR EACH ROW EXECUTE FUNCTION pg_temp.log_batch();
SELECT payload->>'b' AS b FROM hopper.queue_pull('pl-bound', 1);
SELECT op FROM pl_log;
DROP TRIGGER pl_batch_log ON hopper.job_batches;
DROP TABLE pl_log;

-- Takes: packed jobs go straight to history, as the statement sends them.
SELECT count(*) AS pushed FROM hopper.queue_push_batch('pl-take',
    ARRAY(SELECT jsonb_build_object('t', g) FROM generate_series(1, 120) g), kind => 'k');
BEGIN;
CREATE TEMP TABLE taken AS
SELECT 'direct' AS path, t.* FROM hopper.queue_take('pl-take', 2, worker => 'tw') t;
INSERT INTO taken SELECT 'statement', t.* FROM hopper.queue_take('pl-take', 2, worker => 'tw',
    kinds => ARRAY['k']) t;
SELECT path, payload->>'t' AS t, attempt FROM taken ORDER BY id;
SELECT taken FROM hopper.job_batches WHERE queue = 'pl-take' ORDER BY first_id LIMIT 1;
COMMIT;
SELECT count(*) AS kept,
       count(DISTINCT (queue, state, priority, run_at, attempt, max_attempts, created_at,
                       started_at, finished_at, kind, worker, dedup_key, concurrency_key,
                       progress, last_error, errors, progress_detail, result)) AS distinct_rows
FROM hopper.job_history WHERE queue = 'pl-take';
SELECT state, attempt, worker, progress, kind FROM hopper.job_history
WHERE queue = 'pl-take' LIMIT 1;
-- A take that rolls back gives its jobs back to the front of the row; one across the end of a
-- row empties it and goes on into the next.
BEGIN;
SELECT count(*) AS taken FROM hopper.queue_take('pl-take', 10);
ROLLBACK;
SELECT min(payload->>'t') AS first FROM hopper.queue_take('pl-take', 1);
SELECT count(*) AS taken, min((payload->>'t')::int) AS first, max((payload->>'t')::int) AS last
FROM hopper.queue_take('pl-take', 100);
SELECT taken, cardinality(ids) AS jobs FROM hopper.job_batches WHERE queue = 'pl-take';
SELECT count(*) AS finished, count(DISTINCT id) AS distinct_jobs FROM hopper.job_history
WHERE queue = 'pl-take';

SELECT hopper.queue_drop('pl') AND hopper.queue_drop('pl-bound') AND hopper.queue_drop('pl-take')
    AS dropped;
