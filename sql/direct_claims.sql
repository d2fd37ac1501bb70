-- queue_take and queue_pull without a kinds filter go straight through the table and index access
-- methods; with one they run their claim statements. Both ways must leave the same trace, and
-- what the direct claims do not handle (triggers on hopper.jobs, row level security) must still
-- happen.
SET hopper.notify = off;
\i sql/include/try.sql

SELECT hopper.queue_create('direct') AS created;
-- Two jobs alike in all but id and payload, each failed once (so last_error and errors are set).
BEGIN;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('direct',
    ARRAY['{"n": 1}', '{"n": 2}']::jsonb[], kind => 'k', priority => 3, run_at => now(),
    concurrency_keys => ARRAY['c', 'c']);
SELECT count(*) AS pulled FROM hopper.queue_pull('direct', 2, worker => 'first');
COMMIT;
SELECT count(hopper.queue_fail(id, lease_token, 'first try failed', retry_in => '0'))
    AS failed FROM hopper.jobs WHERE queue = 'direct';

-- One transaction takes one job directly and the other through the statement (kinds), with the
-- same worker and clock.
BEGIN;
CREATE TEMP TABLE taken AS
SELECT 'direct' AS path, t.* FROM hopper.queue_take('direct', 1, worker => 'w2', at => now()) t;
INSERT INTO taken SELECT 'statement', t.* FROM hopper.queue_take('direct', 1, worker => 'w2',
    kinds => ARRAY['k'], at => now()) t;
COMMIT;
SELECT path, payload->>'n' AS n, queue, kind, attempt FROM taken ORDER BY path;
SELECT count(DISTINCT (queue, kind, attempt, run_at, created_at)) AS distinct_results
FROM taken;
-- The history rows differ only in id and payload.
SELECT count(*) AS kept,
       count(DISTINCT (queue, state, priority, run_at, attempt, max_attempts, created_at,
                       started_at, finished_at, kind, worker, dedup_key, concurrency_key,
                       progress, last_error, errors, progress_detail, result)) AS distinct_rows
FROM hopper.job_history WHERE queue = 'direct';
SELECT state, attempt, worker, progress, last_error, jsonb_array_length(errors) AS errors,
       started_at - finished_at AS started_by_clock, concurrency_key
FROM hopper.job_history WHERE queue = 'direct' LIMIT 1;

-- A row trigger on the history partition the rows land in fires for a direct take.
CREATE TABLE direct_log (what text, id bigint);
CREATE FUNCTION pg_temp.log_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO direct_log VALUES (TG_TABLE_NAME || ' ' || TG_OP, OLD.id);
        RETURN OLD;
    END IF;
    INSERT INTO direct_log VALUES ('history ' || TG_OP, NEW.id);
    RETURN NEW;
END $$;
SELECT tableoid::regclass AS partition FROM hopper.job_history WHERE queue = 'direct' LIMIT 1
\gset
CREATE TRIGGER direct_history_log AFTER INSERT ON :partition
    FOR EACH ROW EXECUTE FUNCTION pg_temp.log_row();
SELECT hopper.queue_push('direct', '{"n": 3}') AS routed \gset
SELECT count(*) AS taken FROM hopper.queue_take('direct');
SELECT what, id = :routed AS the_job FROM direct_log;
DROP TRIGGER direct_history_log ON :partition;

-- A DELETE trigger on hopper.jobs fires: such a table sends the take to the statement.
TRUNCATE direct_log;
CREATE TRIGGER direct_jobs_log AFTER DELETE ON hopper.jobs
    FOR EACH ROW EXECUTE FUNCTION pg_temp.log_row();
SELECT hopper.queue_push('direct', '{"n": 4}') AS deleted \gset
SELECT payload->>'n' AS n FROM hopper.queue_take('direct');
SELECT what, id = :deleted AS the_job FROM direct_log;
DROP TRIGGER direct_jobs_log ON hopper.jobs;

-- Row level security on hopper.jobs is obeyed: a worker whose policy hides a queue takes nothing
-- from it.
CREATE ROLE regress_hopper_direct_worker;
GRANT hopper_worker TO regress_hopper_direct_worker;
ALTER TABLE hopper.jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY direct_hide ON hopper.jobs TO regress_hopper_direct_worker
    USING (queue <> 'direct');
SELECT hopper.queue_push('direct', '{"n": 5}') AS hidden \gset
SET ROLE regress_hopper_direct_worker;
SELECT count(*) AS taken_through_policy FROM hopper.queue_take('direct');
RESET ROLE;
DROP POLICY direct_hide ON hopper.jobs;
ALTER TABLE hopper.jobs DISABLE ROW LEVEL SECURITY;
SELECT state FROM hopper.jobs WHERE id = :hidden;
SET ROLE regress_hopper_direct_worker;
SELECT payload->>'n' AS n FROM hopper.queue_take('direct');
RESET ROLE;
DROP ROLE regress_hopper_direct_worker;

-- Takes one after another start where the last one stopped (the queue's claim hint), and a more
-- urgent job pushed meanwhile is still taken first.
SELECT count(*) AS pushed FROM hopper.queue_push_batch('direct',
    (SELECT array_agg(jsonb_build_object('n', 10 + i) ORDER BY i) FROM generate_series(1, 4) i),
    priority => 5);
SELECT payload->>'n' AS n FROM hopper.queue_take('direct');
SELECT payload->>'n' AS n FROM hopper.queue_take('direct');
SELECT hopper.queue_push('direct', '{"n": 99}', priority => 1) IS NOT NULL AS urgent_pushed;
SELECT payload->>'n' AS n FROM hopper.queue_take('direct', 2);
SELECT payload->>'n' AS n FROM hopper.queue_take('direct', 5);

-- A queue name compares as the index orders it: a name that sorts between others takes only its
-- own jobs.
SELECT hopper.queue_push(q, jsonb_build_object('q', q)) IS NOT NULL AS pushed
FROM unnest(ARRAY['direct-a', 'direct-b', 'direct-c']) q;
SELECT payload->>'q' AS q FROM hopper.queue_take('direct-b', 10);
SELECT queue FROM hopper.jobs WHERE queue LIKE 'direct-%' ORDER BY queue;

DROP TABLE direct_log;

-- queue_pull leases the same way: one job leased directly and one through the statement (kinds)
-- end up alike but for id, payload and token.
SELECT hopper.queue_create('direct-lease', lease => '45 seconds') AS created;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('direct-lease',
    ARRAY['{"n": 1}', '{"n": 2}']::jsonb[], kind => 'k', priority => 2, run_at => now());
BEGIN;
CREATE TEMP TABLE leased AS
SELECT 'direct' AS path, l.* FROM hopper.queue_pull('direct-lease', 1, worker => 'w3',
    at => now() + interval '1 second', session_bound => true) l;
INSERT INTO leased SELECT 'statement', l.* FROM hopper.queue_pull('direct-lease', 1,
    worker => 'w3', kinds => ARRAY['k'], at => now() + interval '1 second',
    session_bound => true) l;
COMMIT;
SELECT path, payload->>'n' AS n, queue, kind, attempt FROM leased ORDER BY path;
SELECT count(DISTINCT lease_token) AS tokens,
       count(DISTINCT (queue, kind, attempt, lease_until, run_at, created_at)) AS distinct_results
FROM leased;
SELECT count(*) AS running,
       count(DISTINCT (j.state, j.priority, j.run_at, j.attempt, j.lease_until, j.started_at,
                       j.worker, j.claimed_pid, j.claimed_backend_start, j.session_bound))
           AS distinct_rows,
       bool_and(j.lease_token = l.lease_token) AS tokens_match,
       bool_and(j.claimed_pid = pg_backend_pid()) AS claimed_here,
       bool_and(j.lease_until - j.started_at = interval '45 seconds') AS queue_lease,
       bool_and(j.session_bound AND j.worker = 'w3') AS bound_to_w3
FROM hopper.jobs j JOIN leased l USING (id);
-- The tokens fence: each completes its own job only.
SELECT hopper.queue_complete(a.id, b.lease_token) AS with_other_token
FROM leased a JOIN leased b ON a.path <> b.path ORDER BY a.path;
SELECT hopper.queue_complete(id, lease_token) AS completed FROM leased ORDER BY path;
SELECT count(*) AS kept FROM hopper.job_history WHERE queue = 'direct-lease';

-- A lease given to the call overrides the queue's; an UPDATE trigger on hopper.jobs fires.
CREATE TABLE direct_update_log (id bigint, state text);
CREATE FUNCTION pg_temp.log_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO direct_update_log VALUES (NEW.id, NEW.state::text);
    RETURN NEW;
END $$;
SELECT hopper.queue_push('direct-lease', '{"n": 3}') AS plain \gset
SELECT round(extract(epoch FROM lease_until - now())) AS given_lease_s
FROM hopper.queue_pull('direct-lease', 1, lease => '2 minutes');
CREATE TRIGGER direct_update_log AFTER UPDATE ON hopper.jobs
    FOR EACH ROW EXECUTE FUNCTION pg_temp.log_update();
SELECT hopper.queue_push('direct-lease', '{"n": 4}') AS triggered \gset
SELECT payload->>'n' AS n FROM hopper.queue_pull('direct-lease');
SELECT id = :triggered AS the_job, state FROM direct_update_log;
DROP TRIGGER direct_update_log ON hopper.jobs;
DROP TABLE direct_update_log;

-- Concurrent pulls pass each other's locked jobs (SKIP LOCKED) in
-- test/isolation/specs/take.spec; a pull of an empty or paused queue gets nothing.
SELECT hopper.queue_push('direct-lease', '{"n": 5}') IS NOT NULL AS pushed;
SELECT hopper.queue_pause('direct-lease');
SELECT count(*) AS from_paused FROM hopper.queue_pull('direct-lease', 5);
SELECT hopper.queue_resume('direct-lease');
SELECT count(*) AS from_resumed FROM hopper.queue_pull('direct-lease', 5);
SELECT count(*) AS from_empty FROM hopper.queue_pull('direct-lease', 5);

-- Completions go the same way: the history row keeps the lease's attempt, start and worker, and
-- the result; queue_complete_many gives each job its own result, once per id.
SELECT count(*) AS pushed FROM hopper.queue_push_batch('direct-lease',
    ARRAY['{"n": 6}', '{"n": 7}', '{"n": 8}']::jsonb[]);
CREATE TEMP TABLE held AS
SELECT id, lease_token, payload->>'n' AS n FROM hopper.queue_pull('direct-lease', 3, worker => 'w4');
CREATE TEMP TABLE held_rows AS SELECT j.* FROM hopper.jobs j JOIN held USING (id);
SELECT hopper.queue_complete(id, lease_token, jsonb_build_object('done', n)) AS completed
FROM held WHERE n = '6';
SELECT held.n AS completed_n FROM hopper.queue_complete_many(
    (SELECT array_agg(id ORDER BY n) || array_agg(id ORDER BY n) FROM held WHERE n <> '6'),
    (SELECT array_agg(lease_token ORDER BY n) || array_agg(lease_token ORDER BY n)
     FROM held WHERE n <> '6'),
    (SELECT array_agg(jsonb_build_object('done', n) ORDER BY n)
         || array_agg(jsonb_build_object('again', n) ORDER BY n)
     FROM held WHERE n <> '6')) c(id)
JOIN held USING (id) ORDER BY n;
SELECT held.n, h.state, h.result, h.attempt = j.attempt AS same_attempt,
       h.started_at = j.started_at AS same_start, h.worker
FROM hopper.job_history h JOIN held USING (id) JOIN held_rows j USING (id) ORDER BY held.n;

-- A read-only transaction claims and completes nothing, with the statements' error.
SELECT count(*) AS pushed FROM hopper.queue_push_batch('direct-lease',
    ARRAY['{"n": 9}', '{"n": 10}']::jsonb[]);
SELECT id AS ro_id, lease_token AS ro_token FROM hopper.queue_pull('direct-lease') \gset
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT * FROM hopper.queue_take('direct-lease')$$) AS take_read_only;
ROLLBACK;
BEGIN READ ONLY;
SELECT pg_temp.try($$SELECT * FROM hopper.queue_pull('direct-lease')$$) AS pull_read_only;
ROLLBACK;
BEGIN READ ONLY;
SELECT pg_temp.try(format('SELECT hopper.queue_complete(%s, %s)', :ro_id, :ro_token))
    AS complete_read_only;
ROLLBACK;
SELECT payload->>'n' AS n, state FROM hopper.jobs WHERE queue = 'direct-lease' ORDER BY id;
SELECT hopper.queue_complete(:ro_id, :ro_token) AS completed;

-- A rule on hopper.jobs is obeyed too (the push runs the SQL INSERT): one that logs each push.
CREATE TABLE direct_rule_log (id bigint);
CREATE RULE direct_log_insert AS ON INSERT TO hopper.jobs
    DO ALSO INSERT INTO direct_rule_log VALUES (NEW.id);
SELECT hopper.queue_push('direct-lease', '{"n": 11}') AS ruled \gset
SELECT count(*) AS rule_fired FROM direct_rule_log;
DROP RULE direct_log_insert ON hopper.jobs;
DROP TABLE direct_rule_log;

