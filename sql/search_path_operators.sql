-- Operators planted on the caller's search_path: PostgreSQL has no =(hopper.job_state, ...) of its
-- own (only =(anyenum, anyenum)), nor -(integer, numeric), so an exact-type operator in a schema on
-- the path wins over it, even with pg_catalog searched first. Any role that can create in public
-- could then run code as whoever calls hopper next, a superuser included. hopper's SQL names the
-- operator it means, or casts to types pg_catalog has one for; here every planted operator records
-- a call, and the whole API runs without one.
\set own_db hopper_regress_operators
\i sql/include/own_database.sql
SET hopper.notify = off;
\i sql/include/try.sql

\i sql/include/plant_operators.sql
SELECT count(*) > 1000 AS planted FROM pg_operator WHERE oprnamespace = 'public'::regnamespace;
SHOW search_path;
-- The planted operators are live: unqualified, they win over pg_catalog's own.
SELECT 'available'::hopper.job_state = 'available' AS planted_answer;
SELECT 1::integer - 1::numeric AS planted_answer;
SELECT pg_catalog.setval('public.planted_calls', 1, false);

-- Producers, workers and operators, on plain, keyed, limited and packed queues.
SELECT hopper.queue_create('ops', lease => '1 second', backoff_base => '1 millisecond');
SELECT hopper.queue_push('ops', '{"n": 1}') > 0 AS pushed;
SELECT count(*) FROM hopper.queue_push_batch('ops', ARRAY['{"n": 2}', '{"n": 3}']::jsonb[]);
SELECT hopper.queue_push('ops', '{"n": 4}', dedup_key => 'k4') > 0 AS dedup_pushed;
SELECT hopper.queue_push('ops', '{"n": 5}', run_at => now() + interval '1 hour') > 0 AS later;
SELECT hopper.queue_push('ops', '{"n": 6}', kind => 'other') > 0 AS kinded;
SELECT count(*) AS pulled FROM hopper.queue_pull('ops', 1) j
WHERE hopper.queue_heartbeat(j.id, j.lease_token)
  AND hopper.queue_progress(j.id, j.lease_token, 0.5, '{"step": 1}')
  AND hopper.queue_complete(j.id, j.lease_token, '{"ok": true}');
SELECT count(*) AS failed FROM hopper.queue_pull('ops', 1) j
WHERE hopper.queue_fail(j.id, j.lease_token, 'boom', retry_in => '0') IS NOT NULL;
SELECT count(*) AS released FROM hopper.queue_pull('ops', 1) j
WHERE hopper.queue_release(j.id, j.lease_token);
SELECT count(*) AS kinds_pull FROM hopper.queue_pull('ops', 1, kinds => ARRAY['other']) j
WHERE hopper.queue_complete(j.id, j.lease_token);
SELECT hopper.queue_push('ops', '{"n": 7}') > 0 AS pushed_again;
SELECT count(*) AS complete_many
FROM hopper.queue_pull('ops', 1) j, hopper.queue_complete_many(ARRAY[j.id], ARRAY[j.lease_token]) c;
SELECT count(hopper.queue_push('ops', '{}')) FROM generate_series(1, 3);
SELECT count(*) AS complete_pull
FROM hopper.queue_pull('ops', 1) j, hopper.queue_complete_pull(j.id, j.lease_token, NULL, 'ops') n;
SELECT count(*) AS complete_many_pull
FROM (SELECT array_agg(id) AS ids, array_agg(lease_token) AS tokens
      FROM hopper.jobs WHERE queue = 'ops' AND state::text = 'running') r,
     hopper.queue_complete_many_pull(r.ids, r.tokens, NULL, 'ops', 1) n;
-- An expired lease, rescued by the next pull.
SELECT hopper.queue_push('ops', '{"n": 8}') > 0 AS pushed_to_expire;
SELECT count(*) AS to_expire FROM hopper.queue_pull('ops', 10);
SELECT pg_sleep(1.1);
SELECT count(*) >= 0 AS rescuing_pull FROM hopper.queue_pull('ops', 10, at => now());
SELECT hopper.queue_cancel(id) FROM hopper.jobs WHERE queue = 'ops' AND payload = '{"n": 5}';
SELECT hopper.queue_retry(id) IS NOT NULL AS retried FROM hopper.job_history
WHERE queue = 'ops' AND payload = '{"n": 5}';
SELECT count(*) > 0 AS statuses FROM hopper.jobs j, hopper.job_status(j.id) s WHERE j.queue = 'ops';
SELECT count(*) > 0 AS stats FROM hopper.queue_stats();
SELECT count(*) > 0 AS stats_one FROM hopper.queue_stats('ops');
SELECT count(*) > 0 AS listed FROM hopper.queue_jobs('ops');
SELECT count(*) >= 0 AS listed_states FROM unnest(ARRAY['available', 'scheduled', 'running',
    'completed', 'dead', 'cancelled']) s, hopper.queue_jobs('ops', s);

-- Dedup windows: a finished original answers a single push and a batch.
SELECT hopper.queue_push('win', '{}', dedup_key => 'w', dedup_window => '1 hour') AS win_first \gset
SELECT count(*) AS win_done FROM hopper.queue_pull('win', 1) j
WHERE hopper.queue_complete(j.id, j.lease_token);
SELECT hopper.queue_push('win', '{}', dedup_key => 'w', dedup_window => '1 hour') = :win_first
    AS win_original;
SELECT hopper.queue_push_batch('win', ARRAY['{}']::jsonb[], dedup_keys => ARRAY['w'],
    dedup_window => '1 hour') = :win_first AS win_batch_original;
-- Under REPEATABLE READ a push also looks for an original finished past its snapshot
-- (dedup::refuse_unseen), here reading one of the key's that finished outside the window.
INSERT INTO hopper.job_history (id, queue, state, priority, run_at, attempt, max_attempts,
    created_at, finished_at, payload, dedup_key)
VALUES (pg_catalog.nextval('hopper.job_id_seq'), 'win', 'completed', 0,
    pg_catalog.now() OPERATOR(pg_catalog.-) interval '2 hours', 1, 5,
    pg_catalog.now() OPERATOR(pg_catalog.-) interval '2 hours',
    pg_catalog.now() OPERATOR(pg_catalog.-) interval '2 hours', '{}', 'old');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT hopper.queue_push('win', '{}', dedup_key => 'old', dedup_window => '1 hour') IS NOT NULL
    AS win_rr_pushed;
SELECT pg_catalog.count(*) AS win_rr_batch FROM hopper.queue_push_batch('win',
    ARRAY['{}']::jsonb[], dedup_keys => ARRAY['old2'], dedup_window => '1 hour');
COMMIT;

-- Taking in the transaction.
BEGIN;
SELECT hopper.queue_push('take', '{}') > 0 AS pushed;
COMMIT;
BEGIN;
SELECT count(*) AS taken FROM hopper.queue_take('take', 1);
ROLLBACK;
BEGIN;
SELECT count(*) AS fail_taken FROM hopper.queue_take('take', 1) t
WHERE hopper.queue_fail_taken(t.id, 'no', permanent => true) IS NOT NULL;
COMMIT;

-- Limited queues: the statements with a kinds filter, the C++ claim without.
SELECT hopper.queue_create('lim');
SELECT hopper.queue_set_concurrency('lim', max_running => 10, key_max_running => 1);
SELECT hopper.queue_set_key_limit('lim', 'a', 1);
SELECT hopper.queue_set_rate_limit('lim', 100, '1 second', each_key => true);
SELECT count(hopper.queue_push('lim', '{}', concurrency_key => k, kind => 'x'))
FROM unnest(ARRAY['a', 'a', 'b', NULL]) k;
SELECT count(*) AS limited_kinds FROM hopper.queue_pull('lim', 1, kinds => ARRAY['x']);
SELECT count(*) AS limited_pull FROM hopper.queue_pull('lim', 3);
SELECT count(*) > 0 AS limits FROM hopper.queue_limits('lim');
SELECT pg_temp.try($$SELECT hopper.queue_take('lim', 1)$$) AS limited_take;

-- Packed batches.
SET hopper.pack_batches = on;
SELECT count(*) FROM hopper.queue_push_batch('packed', ARRAY['{}', '{}', '{}']::jsonb[]);
RESET hopper.pack_batches;
SELECT count(*) AS packed_pull FROM hopper.queue_pull('packed', 2);
SELECT hopper.queue_cancel(max(id)) FROM hopper.queue_jobs('packed');

-- Schedules, pause, purge, drop.
SELECT hopper.queue_schedule('every-minute', '* * * * *', 'sched') IS NOT NULL AS scheduled;
SELECT hopper.schedule_run_due(now() + interval '2 minutes') >= 0 AS ran;
SELECT count(*) > 0 AS schedules FROM hopper.queue_schedules();
SELECT hopper.queue_pause('ops'), hopper.queue_resume('ops');
SELECT hopper.queue_set_notify_done('ops', true);
SELECT hopper.queue_purge('ops') >= 0 AS purged;
SELECT hopper.queue_drop('lim');
SELECT count(*) >= 0 AS reaper FROM hopper.reaper_status();
SELECT count(*) >= 0 AS positions FROM hopper.claim_positions();

-- Not one call of a planted operator.
SELECT pg_catalog.nextval('public.planted_calls') - 1 AS planted_calls;

\c :regression_db
DROP DATABASE :own_db;
