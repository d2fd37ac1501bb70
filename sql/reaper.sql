-- The reaper's SQL face: reaper_status / reaper_start / reaper_stop, its settings, its privileges,
-- and one real rescue (an expired lease) observed by polling. Crash recovery, both start-up modes,
-- retention and the rescue storm need a server of their own: they are TAP tests (test/t).
SET hopper.notify = off;
\i sql/include/try.sql
GRANT EXECUTE ON FUNCTION pg_temp.try(text) TO PUBLIC;
\i sql/include/wait_for.sql

-- CREATE EXTENSION started this database's reaper.
SELECT pg_temp.wait_for($$EXISTS (SELECT 1 FROM pg_temp.my_reaper WHERE last_run IS NOT NULL)$$)
    AS reaper_running;
SELECT count(*) AS reapers, bool_and(pid > 0) AS has_pid, bool_and(mode IN ('dynamic', 'preload')) AS mode_known,
       bool_and(jobs_rescued >= 0 AND jobs_pruned >= 0) AS counters
FROM pg_temp.my_reaper;
-- It is a background worker of this database, holding the one-reaper lock.
SELECT a.backend_type, a.datname = current_database() AS here, l.mode AS lock_mode
FROM pg_temp.my_reaper r
JOIN pg_stat_activity a ON a.pid = r.pid
JOIN pg_locks l ON l.pid = r.pid AND l.locktype = 'advisory' AND l.classid = x'686f7072'::int
     AND l.objid = 1 AND l.objsubid = 26736;
-- Exactly one per database: starting another is refused while it runs.
SELECT hopper.reaper_start() AS started_second;
SELECT count(*) AS reapers FROM pg_temp.my_reaper;

-- An expired lease is rescued without anybody pulling: back with a backoff (scheduled), the
-- attempt counted, the old token fenced off.
SELECT hopper.queue_create('reaped', backoff_base => '1 hour', jitter => 0) AS created;
SELECT hopper.queue_push('reaped', '{"n": 1}') AS id \gset
SELECT lease_token AS token FROM hopper.queue_pull('reaped', 1, lease => '1 second', worker => 'w-lost') \gset
SELECT pg_temp.wait_for(format('(SELECT state <> %L FROM hopper.job_status(%s))', 'running', :id))
    AS rescued;
SELECT state, attempt, last_error, errors->-1->>'error' AS logged, errors->-1->>'worker' AS worker,
       run_at > now() + interval '59 minutes' AS backed_off
FROM hopper.job_status(:id);
SELECT hopper.queue_heartbeat(:id, :token) AS stale_heartbeat,
       hopper.queue_complete(:id, :token) AS stale_complete;
SELECT jobs_rescued >= 1 AS counted FROM pg_temp.my_reaper;

-- A queue whose rescue fails does not hold the others' back: a trigger of the user's refuses the
-- rescue of one queue's job (the reaper logs a warning each pass), and the job of the queue it
-- reaches next is rescued all the same. Once the trigger is gone, the first is rescued too.
CREATE FUNCTION public.regress_refuse_rescue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'rescue of job % refused', OLD.id;
END $$;
CREATE TRIGGER regress_refuse_rescue BEFORE UPDATE ON hopper.jobs FOR EACH ROW
    WHEN (OLD.queue = 'reaped_a' AND NEW.state <> 'running')
    EXECUTE FUNCTION public.regress_refuse_rescue();
SELECT hopper.queue_create('reaped_a') AS created, hopper.queue_create('reaped_b') AS created;
SELECT hopper.queue_push('reaped_a', '{}') AS ra, hopper.queue_push('reaped_b', '{}') AS rb \gset
SELECT count(*) AS pulled FROM hopper.queue_pull('reaped_a', 1, lease => '1 second');
SELECT count(*) AS pulled FROM hopper.queue_pull('reaped_b', 1, lease => '1 second');
SELECT pg_temp.wait_for(format('(SELECT state <> %L FROM hopper.job_status(%s))', 'running', :rb))
    AS next_queue_rescued;
SELECT state AS refused_still FROM hopper.job_status(:ra);
DROP TRIGGER regress_refuse_rescue ON hopper.jobs;
DROP FUNCTION public.regress_refuse_rescue();
SELECT pg_temp.wait_for(format('(SELECT state <> %L FROM hopper.job_status(%s))', 'running', :ra))
    AS rescued_once_allowed;
SELECT hopper.queue_drop('reaped_a') AS dropped, hopper.queue_drop('reaped_b') AS dropped;

-- Settings: server-wide (SIGHUP), not per session.
SHOW hopper.reaper_naptime;
SHOW hopper.reaper_batch_size;
SHOW hopper.reaper_enabled;
SHOW hopper.reaper_prune_interval;
SELECT pg_temp.try($$SET hopper.reaper_naptime = '5s'$$);
SELECT pg_temp.try($$SET hopper.reaper_enabled = off$$);
SELECT pg_temp.try($$SET hopper.reaper_batch_size = 0$$);

-- Privileges: status for the hopper roles, start and stop for superusers only.
CREATE ROLE regress_reaper_worker;
GRANT hopper_worker TO regress_reaper_worker;
CREATE ROLE regress_reaper_nobody;
SET ROLE regress_reaper_worker;
SELECT pg_temp.try($$SELECT count(*) FROM hopper.reaper_status()$$) AS worker_status;
SELECT pg_temp.try($$SELECT hopper.reaper_stop()$$) AS worker_stop;
SELECT pg_temp.try($$SELECT hopper.reaper_start()$$) AS worker_start;
SET ROLE regress_reaper_nobody;
SELECT pg_temp.try($$SELECT count(*) FROM hopper.reaper_status()$$) AS nobody_status;
RESET ROLE;
DROP ROLE regress_reaper_worker, regress_reaper_nobody;

-- Stop waits until the reaper has gone; a second stop finds none. It stays stopped: a push does
-- not bring it back.
SELECT hopper.reaper_stop() AS stopped;
SELECT count(*) AS reapers FROM pg_temp.my_reaper;
SELECT hopper.reaper_stop() AS stopped_again;
-- A new session: its first push looks for a missing reaper (later ones only every few seconds).
\c -
SET hopper.notify = off;
SELECT hopper.queue_push('reaped', '{"n": 2}') > 0 AS pushed;
SELECT pg_sleep(1);
SELECT count(*) AS reapers_after_push FROM hopper.reaper_status() WHERE database = current_database();
\i sql/include/wait_for.sql

-- Start brings it back (after this transaction commits).
SELECT hopper.reaper_start() AS started;
SELECT pg_temp.wait_for($$EXISTS (SELECT 1 FROM pg_temp.my_reaper)$$) AS running_again;

-- The reaper runs as a superuser: an operator planted ahead of pg_catalog in the database's
-- search_path (which the database's owner may set) is never called by it.
CREATE TABLE public.regress_planted_calls (at timestamptz);
CREATE FUNCTION public.regress_planted_eq(text, text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.regress_planted_calls VALUES (now());
    RETURN $1 OPERATOR(pg_catalog.=) $2;
END $$;
CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.regress_planted_eq);
SELECT format('ALTER DATABASE %I SET search_path = public, pg_catalog', current_database()) \gexec
SELECT hopper.reaper_stop() AS stopped;
SELECT clock_timestamp() AS restarted_at \gset
SELECT hopper.reaper_start() AS started;
-- Two passes or more (a pass each second) have run over the queues since.
SELECT pg_temp.wait_for(format('EXISTS (SELECT 1 FROM pg_temp.my_reaper WHERE last_run > %L::timestamptz + interval %L)',
                               :'restarted_at', '1.5 seconds')) AS passes_made;
SELECT count(*) AS planted_calls FROM public.regress_planted_calls;
SELECT format('ALTER DATABASE %I RESET search_path', current_database()) \gexec
DROP OPERATOR public.= (text, text);
DROP FUNCTION public.regress_planted_eq(text, text);
DROP TABLE public.regress_planted_calls;

-- Job rows written by hand (producers may insert into hopper.jobs) under names no queue may have:
-- one too long for a NOTIFY channel, one that is hopper:done's. Both are session-bound jobs of a
-- backend that is gone, as is a job of a real queue: the rescue of gone sessions' jobs, one
-- statement for them all, puts the three back and announces the real queue alone (a NOTIFY on the
-- long name failed the rescue on every pass, and the real job stayed running until its lease ran out).
CREATE ROLE regress_reaper_app;
GRANT hopper_producer TO regress_reaper_app;
SET ROLE regress_reaper_app;
INSERT INTO hopper.jobs (queue, state, run_at, max_attempts, created_at, payload, session_bound,
                         lease_token, lease_until, claimed_pid, claimed_backend_start)
SELECT q, 'running', now(), 5, now(), '{}', true, 1, now() + interval '1 day', 999999, now()
FROM unnest(ARRAY[repeat('x', 80), 'done']) q;
RESET ROLE;
DROP ROLE regress_reaper_app;
SELECT hopper.queue_push('reaped', '{"n": 3}') AS orphan \gset
UPDATE hopper.jobs SET state = 'running', lease_token = 2, lease_until = now() + interval '1 day',
    session_bound = true, claimed_pid = 999998, claimed_backend_start = now()
WHERE id = :orphan;
SELECT pg_temp.wait_for(format('(SELECT state <> %L FROM hopper.job_status(%s))', 'running', :orphan))
    AS orphan_rescued;
SELECT state, last_error FROM hopper.job_status(:orphan);
SELECT pg_temp.wait_for($$NOT EXISTS (SELECT 1 FROM hopper.jobs WHERE state = 'running'
                                      AND queue IN (repeat('x', 80), 'done'))$$)
    AS hand_written_rescued;
SELECT left(queue, 10) AS queue, state, last_error FROM hopper.jobs WHERE claimed_pid IS NULL
    AND last_error LIKE 'worker backend gone%' ORDER BY queue;
DELETE FROM hopper.jobs WHERE queue IN (repeat('x', 80), 'done') OR id = :orphan;

-- A pass that changes no queue makes no session forget the queues it knows: a session's pushes
-- over several passes read hopper.queues not once (its statements that changed no row, as the
-- look for unmarked packed queues every pass, invalidated every session's memory of the queues).
-- The reads are counted as a difference within one transaction: pg_stat_xact_* also counts what
-- earlier transactions read and have not reported yet. VACUUM ANALYZE first, so that autovacuum
-- leaves both tables alone meanwhile (its statistics invalidate them too).
VACUUM ANALYZE hopper.queues, hopper.jobs;
SELECT hopper.queue_create('cached') AS created;
SELECT count(hopper.queue_push('cached', '{}')) AS warmed FROM generate_series(1, 2);
CREATE FUNCTION pg_temp.queue_reads() RETURNS bigint LANGUAGE sql AS $$
    SELECT idx_scan + seq_scan FROM pg_stat_xact_user_tables
    WHERE relid = 'hopper.queues'::regclass $$;
BEGIN;
SELECT pg_temp.queue_reads() AS reads_before \gset
SELECT count(*) AS pushed
FROM (SELECT hopper.queue_push('cached', '{}'), pg_sleep(0.6) FROM generate_series(1, 5)) p;
SELECT pg_temp.queue_reads() - :reads_before AS reads_by_pushes_over_passes;
SELECT pg_temp.wait_for('(SELECT last_run > now() FROM pg_temp.my_reaper)') AS passes_ran;
-- A statement of one's own that changes no row is the same; one that changes a row is seen (the
-- reads counted are the push's, not the statement's).
UPDATE hopper.queues SET paused = true WHERE name = 'cached' AND false;
SELECT pg_temp.queue_reads() AS reads_before \gset
SELECT hopper.queue_push('cached', '{}') > 0 AS pushed;
SELECT pg_temp.queue_reads() - :reads_before AS reads_after_no_change;
UPDATE hopper.queues SET paused = paused WHERE name = 'cached';
SELECT pg_temp.queue_reads() AS reads_before \gset
SELECT hopper.queue_push('cached', '{}') > 0 AS pushed;
SELECT pg_temp.queue_reads() - :reads_before AS reads_after_change;
COMMIT;
SELECT hopper.queue_drop('cached') AS dropped;

-- Leave it stopped, so that the suites after this one run with no reaper acting behind their back.
SELECT hopper.reaper_stop() AS stopped_at_end;
