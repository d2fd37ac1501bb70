-- Periodic jobs: queue_schedule / queue_unschedule / queue_schedules / schedule_run_due, with time
-- travel through schedule_run_due(at). The reaper, which also runs schedules, is stopped while
-- the test travels, and started at the end to show that it pushes a due schedule by itself.
SET timezone = 'UTC';
SET hopper.notify = off;
\i sql/include/try.sql
GRANT EXECUTE ON FUNCTION pg_temp.try(text) TO PUBLIC;
\i sql/include/wait_for.sql
SELECT hopper.reaper_stop() IS NOT NULL AS reaper_stopped;

-- Creating a schedule returns its next run (cron_next after now) and creates its queue.
SELECT hopper.queue_schedule('nightly', '30 2 * * *', 'sched', '{"report": "daily"}',
                             kind => 'report', priority => -1, max_attempts => 2)
       = hopper.cron_next('30 2 * * *', now()) AS returns_next_run;
SELECT queue, available FROM hopper.queue_stats('sched');
SELECT name, cron, queue, kind, priority, max_attempts, payload, last_run_at, last_job_id,
       next_run_at = hopper.cron_next(cron, now()) AS next_ok
FROM hopper.queue_schedules();
SELECT next_run_at AS tick FROM hopper.queue_schedules() WHERE name = 'nightly' \gset

-- Not due a minute before its tick; due at it: one job with the schedule's settings.
SELECT hopper.schedule_run_due(:'tick'::timestamptz - interval '1 minute') AS pushed_early;
SELECT hopper.schedule_run_due(:'tick') AS pushed_at_tick;
SELECT kind, state, priority, max_attempts, payload FROM hopper.queue_jobs('sched');
SELECT last_run_at = :'tick' AS last_run_is_tick, next_run_at = :'tick'::timestamptz + interval '1 day' AS next_is_tomorrow,
       last_job_id = (SELECT id FROM hopper.queue_jobs('sched')) AS last_job_known
FROM hopper.queue_schedules() WHERE name = 'nightly';
-- The job carries the dedup key schedule:<name>:<tick in epoch seconds>.
SELECT hopper.queue_push('sched', '{}', dedup_key => 'schedule:nightly:' || extract(epoch FROM :'tick'::timestamptz)::bigint)
       = (SELECT id FROM hopper.queue_jobs('sched')) AS keyed_by_tick;
-- Running again for the same tick pushes nothing: the schedule has moved on.
SELECT hopper.schedule_run_due(:'tick') AS pushed_again;
-- Even when the tick is seen again (next_run_at put back by hand) after its job completed, the
-- dedup key and its window return that job instead of pushing a second one.
SELECT hopper.queue_complete(id, lease_token) AS completed FROM hopper.queue_pull('sched');
UPDATE hopper.schedules SET next_run_at = :'tick' WHERE name = 'nightly';
SELECT hopper.schedule_run_due(:'tick') AS pushed_for_seen_tick;
SELECT count(*) AS jobs_of_queue FROM hopper.queue_jobs('sched');
SELECT last_job_id = (SELECT id FROM hopper.queue_jobs('sched')) AS same_job FROM hopper.queue_schedules()
WHERE name = 'nightly';
-- The next tick is a new job.
SELECT hopper.schedule_run_due(:'tick'::timestamptz + interval '1 day') AS pushed_next_day;
SELECT count(*) AS jobs_of_queue FROM hopper.queue_jobs('sched');

-- Missed ticks (nobody ran the schedule for 65 minutes of a 10-minute schedule): one job, for the
-- latest missed tick, not a burst of seven; the next run is the tick after `at`.
SELECT hopper.queue_schedule('tenmin', '*/10 * * * *', 'sched-missed') AS ten_tick \gset
SELECT hopper.schedule_run_due(:'ten_tick'::timestamptz + interval '65 minutes') AS pushed_after_gap;
SELECT last_run_at - :'ten_tick'::timestamptz AS ran_for, next_run_at - :'ten_tick'::timestamptz AS next_in
FROM hopper.queue_schedules() WHERE name = 'tenmin';
SELECT count(*) AS jobs FROM hopper.queue_jobs('sched-missed');
SELECT hopper.queue_unschedule('tenmin') AS unscheduled;

-- Several due schedules in one run; a schedule's queue may be shared.
SELECT hopper.queue_schedule('a', '@hourly', 'sched-many') IS NOT NULL AS a,
       hopper.queue_schedule('b', '@hourly', 'sched-many', '{"b": true}') IS NOT NULL AS b,
       hopper.queue_schedule('c', '0 * * * *', 'sched-many', kind => 'c') IS NOT NULL AS c;
SELECT hopper.schedule_run_due(now() + interval '1 hour') AS pushed_three;
SELECT kind, payload FROM hopper.queue_jobs('sched-many') ORDER BY id;
-- Dropping a queue drops its schedules.
SELECT hopper.queue_drop('sched-many') AS dropped;
SELECT name FROM hopper.queue_schedules() ORDER BY name;

-- Replacing a schedule changes its settings and next run, and keeps its last run.
SELECT hopper.queue_schedule('nightly', '0 3 * * mon', 'sched', '{"report": "weekly"}')
       = hopper.cron_next('0 3 * * mon', now()) AS replaced;
SELECT name, cron, kind, priority, max_attempts, payload, last_run_at IS NOT NULL AS kept_last_run
FROM hopper.queue_schedules();

-- Declared again with the same cron expression (an application that declares its schedules at
-- every start), a schedule keeps its next run: a tick due at that moment still runs, once. A new
-- expression recomputes it.
SELECT hopper.queue_schedule('redeclared', '*/5 * * * *', 'sched-redeclared') IS NOT NULL AS declared;
UPDATE hopper.schedules SET next_run_at = '2026-01-01 00:05:00+00' WHERE name = 'redeclared';
SELECT hopper.queue_schedule('redeclared', '*/5 * * * *', 'sched-redeclared', '{"v": 2}')
       = '2026-01-01 00:05:00+00' AS due_tick_kept;
SELECT hopper.schedule_run_due() AS pushed_due_tick;
SELECT payload FROM hopper.queue_jobs('sched-redeclared');
SELECT hopper.queue_schedule('redeclared', '*/10 * * * *', 'sched-redeclared')
       = hopper.cron_next('*/10 * * * *', now()) AS new_cron_recomputed;
SELECT hopper.queue_drop('sched-redeclared') AS dropped;

-- A next_run_at set by hand is a tick of its own, also within a second of another one: its dedup
-- key keeps the tick's fraction of a second (they shared one key, and the second run pushed
-- nothing while last_run_at said it ran). A tick on a whole second has no decimals. Run as of
-- times in the past, with no tick of the expression between the hand-set time and then.
SELECT hopper.queue_schedule('subsecond', '0 0 1 1 *', 'sched-subsecond') IS NOT NULL AS scheduled;
UPDATE hopper.schedules SET next_run_at = '2020-06-01 12:00:00.2+00' WHERE name = 'subsecond';
SELECT hopper.schedule_run_due('2020-06-01 12:00:00.9+00') AS pushed_first;
UPDATE hopper.schedules SET next_run_at = '2020-06-01 12:00:00.65+00' WHERE name = 'subsecond';
SELECT hopper.schedule_run_due('2020-06-01 12:00:00.9+00') AS pushed_same_second;
SELECT last_run_at, (SELECT count(*) FROM hopper.jobs WHERE queue = 'sched-subsecond') AS jobs,
       last_job_id = (SELECT max(id) FROM hopper.jobs WHERE queue = 'sched-subsecond') AS last_job_new
FROM hopper.queue_schedules() WHERE name = 'subsecond';
UPDATE hopper.schedules SET next_run_at = '2020-06-01 12:00:01+00' WHERE name = 'subsecond';
SELECT hopper.schedule_run_due('2020-06-01 12:00:01.5+00') AS pushed_whole_second;
UPDATE hopper.schedules SET next_run_at = '1969-12-31 23:59:58.5+00' WHERE name = 'subsecond';
SELECT hopper.schedule_run_due('1969-12-31 23:59:59+00') AS pushed_before_1970;
UPDATE hopper.schedules SET next_run_at = '294270-06-01 12:00:00.5+00' WHERE name = 'subsecond';
SELECT hopper.schedule_run_due('294270-06-02 00:00:00+00') AS pushed_far_ahead;
SELECT j.dedup_key, j.dedup_key = 'schedule:subsecond:' || trim_scale(extract(epoch FROM t.tick))
       AS as_extract_writes
FROM (SELECT dedup_key, row_number() OVER (ORDER BY id) AS n
      FROM hopper.jobs WHERE queue = 'sched-subsecond') j
JOIN (VALUES (1, timestamptz '2020-06-01 12:00:00.2+00'), (2, '2020-06-01 12:00:00.65+00'),
             (3, '2020-06-01 12:00:01+00'), (4, '1969-12-31 23:59:58.5+00'),
             (5, '294270-06-01 12:00:00.5+00')) t(n, tick) USING (n)
ORDER BY n;
SELECT hopper.queue_drop('sched-subsecond') AS dropped;

-- Bad input: 22004 / 22023 / 22003 / P0002 naming the argument; nothing changes.
SELECT pg_temp.try($$SELECT hopper.queue_schedule(NULL, '* * * * *', 'sched')$$);
SELECT pg_temp.try($$SELECT hopper.queue_schedule('', '* * * * *', 'sched')$$);
SELECT pg_temp.try($$SELECT hopper.queue_schedule(repeat('n', 129), '* * * * *', 'sched')$$);
SELECT pg_temp.try($$SELECT hopper.queue_schedule('x', NULL, 'sched')$$);
SELECT pg_temp.try($$SELECT hopper.queue_schedule('x', '', 'sched')$$);
SELECT pg_temp.try($$SELECT hopper.queue_schedule('x', '* * * *', 'sched')$$);
SELECT pg_temp.try($$SELECT hopper.queue_schedule('x', '0 0 * * funday', 'sched')$$);
SELECT pg_temp.try($$SELECT hopper.queue_schedule('x', '0 0 30 2 *', 'sched')$$);
SELECT pg_temp.try($$SELECT hopper.queue_schedule('x', '* * * * *', NULL)$$);
SELECT pg_temp.try($$SELECT hopper.queue_schedule('x', '* * * * *', 'bad queue')$$);
SELECT pg_temp.try($$SELECT hopper.queue_schedule('x', '* * * * *', 'sched', NULL)$$);
SELECT pg_temp.try($$SELECT hopper.queue_schedule('x', '* * * * *', 'sched', '[1]')$$);
SELECT pg_temp.try($$SELECT hopper.queue_schedule('x', '* * * * *', 'sched', kind => '')$$);
SELECT pg_temp.try($$SELECT hopper.queue_schedule('x', '* * * * *', 'sched', priority => 40000)$$);
SELECT pg_temp.try($$SELECT hopper.queue_schedule('x', '* * * * *', 'sched', max_attempts => 0)$$);
SET hopper.auto_create_queues = off;
SELECT pg_temp.try($$SELECT hopper.queue_schedule('x', '* * * * *', 'sched-unknown')$$);
RESET hopper.auto_create_queues;
SELECT pg_temp.try($$SELECT hopper.queue_unschedule(NULL)$$);
SELECT pg_temp.try($$SELECT hopper.schedule_run_due('infinity')$$);
SELECT name, cron FROM hopper.queue_schedules();
SELECT hopper.queue_unschedule('nightly') AS unscheduled, hopper.queue_unschedule('nightly') AS again;

-- Privileges: producers manage schedules, workers may only preview cron expressions.
CREATE ROLE regress_sched_app;
GRANT hopper_producer TO regress_sched_app;
CREATE ROLE regress_sched_worker;
GRANT hopper_worker TO regress_sched_worker;
SET ROLE regress_sched_app;
SELECT pg_temp.try($$SELECT hopper.queue_schedule('app', '0 0 1 1 *', 'sched')$$) AS app_schedule;
SELECT pg_temp.try($$SELECT count(*) FROM hopper.queue_schedules()$$) AS app_list;
SELECT pg_temp.try($$SELECT hopper.schedule_run_due()$$) AS app_run;
-- Only a superuser runs schedules ahead of time: it moves their next runs past that time for good.
SELECT pg_temp.try($$SELECT hopper.schedule_run_due(hopper.cron_next('0 0 1 1 *', now()))$$) AS app_run_ahead;
SELECT pg_temp.try($$SELECT hopper.queue_unschedule('app')$$) AS app_unschedule;
SET ROLE regress_sched_worker;
SELECT pg_temp.try($$SELECT hopper.cron_next('@daily', now()) > now()$$) AS worker_cron_next;
SELECT pg_temp.try($$SELECT hopper.queue_schedule('w', '0 0 1 1 *', 'sched')$$) AS worker_schedule;
SELECT pg_temp.try($$SELECT count(*) FROM hopper.queue_schedules()$$) AS worker_list;
SELECT pg_temp.try($$SELECT count(*) FROM hopper.schedules$$) AS worker_reads_table;
RESET ROLE;
DROP ROLE regress_sched_app, regress_sched_worker;

-- The running reaper pushes a due schedule by itself (next_run_at put into the past by hand).
SELECT hopper.reaper_start() AS reaper_started;
SELECT hopper.queue_schedule('auto', '0 0 1 1 *', 'sched-auto', '{"by": "reaper"}') IS NOT NULL AS scheduled;
UPDATE hopper.schedules SET next_run_at = now() - interval '1 minute' WHERE name = 'auto';
SELECT pg_temp.wait_for($$EXISTS (SELECT 1 FROM hopper.queue_jobs('sched-auto'))$$) AS reaper_pushed;
SELECT payload FROM hopper.queue_jobs('sched-auto');
SELECT pg_temp.wait_for($$(SELECT next_run_at = hopper.cron_next('0 0 1 1 *', now()) FROM hopper.queue_schedules() WHERE name = 'auto')$$)
    AS moved_to_next_year;
SELECT count(*) AS still_one_job FROM hopper.queue_jobs('sched-auto');

SELECT hopper.queue_drop('sched') AS d1, hopper.queue_drop('sched-missed') AS d2,
       hopper.queue_drop('sched-auto') AS d3;
SELECT count(*) AS schedules_left FROM hopper.queue_schedules();

-- A schedule written by hand must be one the reaper can run: a bad row failed its batch of due
-- schedules on every pass, and every schedule of the database with it.
SELECT hopper.queue_schedule('by-hand', '* * * * *', 'hand') IS NOT NULL AS scheduled;
\set VERBOSITY sqlstate
UPDATE hopper.schedules SET cron = 'every minute please' WHERE name = 'by-hand';
UPDATE hopper.schedules SET payload = '[1, 2]' WHERE name = 'by-hand';
UPDATE hopper.schedules SET kind = '' WHERE name = 'by-hand';
\set VERBOSITY default
SELECT cron, payload, kind FROM hopper.schedules WHERE name = 'by-hand';
SELECT hopper.queue_drop('hand') AS dropped;

-- A schedule whose push fails (a trigger of the operator's refuses its queue's jobs) is reported
-- and left due, and the other schedules run: its failure undid the whole run before, and it
-- sorted first again at every pass.
CREATE FUNCTION pg_temp.refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.queue = 'sched-bad' THEN RAISE EXCEPTION 'no jobs for sched-bad'; END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER refuse_bad BEFORE INSERT ON hopper.jobs FOR EACH ROW EXECUTE FUNCTION pg_temp.refuse_bad();
SELECT hopper.queue_schedule('a-bad', '* * * * *', 'sched-bad') IS NOT NULL AS scheduled,
       hopper.queue_schedule('b-good', '* * * * *', 'sched-good') IS NOT NULL AS scheduled;
SELECT hopper.schedule_run_due(now() + interval '2 minutes') AS pushed;
SELECT name, last_run_at IS NOT NULL AS ran FROM hopper.schedules
WHERE name IN ('a-bad', 'b-good') ORDER BY name;
SELECT count(*) AS good_jobs FROM hopper.queue_jobs('sched-good');
DROP TRIGGER refuse_bad ON hopper.jobs;
SELECT hopper.queue_drop('sched-bad') AS d1, hopper.queue_drop('sched-good') AS d2;

-- queue_drop deletes the queue's schedules and limits itself: their foreign keys' cascades are
-- triggers, which do not fire under session_replication_role = replica, and a schedule left
-- behind made the queue again at its next run, with its old limits listed and not enforced.
SELECT hopper.queue_create('sched-replica') AS created;
SELECT hopper.queue_set_key_limit('sched-replica', 'k', 1);
SELECT hopper.queue_set_rate_limit('sched-replica', 1, '1 hour');
SELECT hopper.queue_schedule('replica-tick', '0 0 1 1 *', 'sched-replica') IS NOT NULL AS scheduled;
SET session_replication_role = replica;
SELECT hopper.queue_drop('sched-replica') AS dropped;
RESET session_replication_role;
SELECT (SELECT count(*) FROM hopper.schedules WHERE queue = 'sched-replica') AS schedules,
       (SELECT count(*) FROM hopper.queue_key_limits WHERE queue = 'sched-replica') AS key_limits,
       (SELECT count(*) FROM hopper.rate_limits WHERE queue = 'sched-replica') AS rate_limits;
SELECT hopper.schedule_run_due(hopper.cron_next('0 0 1 1 *', now())) AS pushed;
SELECT count(*) AS made_again FROM hopper.queues WHERE name = 'sched-replica';

-- Out of replica mode the cascades delete them, as the tables' owner: a role allowed to drop
-- queues needs no rights on the schedules and limits (its drop was refused, "permission denied
-- for table rate_limits", even for a queue that had none).
CREATE ROLE regress_queue_admin;
GRANT USAGE ON SCHEMA hopper TO regress_queue_admin;
GRANT EXECUTE ON FUNCTION hopper.queue_drop(text) TO regress_queue_admin;
GRANT SELECT, INSERT, UPDATE, DELETE
    ON hopper.queues, hopper.jobs, hopper.job_batches, hopper.job_history TO regress_queue_admin;
SELECT hopper.queue_create('sched-admin') AS created;
SELECT hopper.queue_set_key_limit('sched-admin', 'k', 1);
SELECT hopper.queue_schedule('admin-tick', '0 0 1 1 *', 'sched-admin') IS NOT NULL AS scheduled;
SET ROLE regress_queue_admin;
SELECT hopper.queue_drop('sched-admin') AS dropped_by_admin;
RESET ROLE;
SELECT (SELECT count(*) FROM hopper.schedules WHERE queue = 'sched-admin') AS schedules,
       (SELECT count(*) FROM hopper.queue_key_limits WHERE queue = 'sched-admin') AS key_limits;
DROP OWNED BY regress_queue_admin;
DROP ROLE regress_queue_admin;
