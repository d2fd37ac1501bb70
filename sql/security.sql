-- What a producer or a worker cannot do by writing hopper's tables by hand or through a superuser's
-- runs: push as someone else (a schedule runs with its owner's rights), set a queue's
-- administrative settings, break the rate limits' arithmetic, outlive a row level security policy
-- through a backend's memory of queues, or have a schedule push a payload too large for a push.
SET timezone = 'UTC';
SET hopper.notify = off;
\i sql/include/try.sql
GRANT EXECUTE ON FUNCTION pg_temp.try(text) TO PUBLIC;
-- This test runs schedules itself, as the reaper would (a superuser calling schedule_run_due).
SELECT hopper.reaper_stop() IS NOT NULL AS reaper_stopped;

CREATE ROLE regress_sec_prod IN ROLE hopper_producer;
CREATE ROLE regress_sec_work IN ROLE hopper_worker;
SELECT hopper.queue_create('sec-a') AS a, hopper.queue_create('sec-b') AS b;

-- 1. Schedules run with their owner's rights. Row level security lets the producer push to
-- queue sec-a only; its schedule for sec-b is refused when a superuser (the reaper) runs it.
ALTER TABLE hopper.jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY sec_prod_a ON hopper.jobs TO regress_sec_prod
    USING (queue = 'sec-a') WITH CHECK (queue = 'sec-a');
SET ROLE regress_sec_prod;
SELECT pg_temp.try($$SELECT hopper.queue_push('sec-b', '{}')$$) AS push_b;
SELECT hopper.queue_schedule('sec-evil', '* * * * *', 'sec-b', '{"evil": true}') IS NOT NULL AS evil,
       hopper.queue_schedule('sec-good', '* * * * *', 'sec-a', '{"good": true}') IS NOT NULL AS good;
-- The owner is the role that writes the row: a producer may not name another.
SELECT pg_temp.try($$INSERT INTO hopper.schedules (name, cron, queue, next_run_at, owner)
                     VALUES ('sec-forged', '* * * * *', 'sec-b', now(), 'regress_sec_work')$$) AS forged;
SELECT pg_temp.try($$UPDATE hopper.schedules SET owner = 'regress_sec_work' WHERE name = 'sec-evil'$$)
    AS reowned;
RESET ROLE;
-- A superuser's schedule that the producer changes by hand becomes the producer's: it must not
-- push, with the superuser's rights, a job the superuser did not define.
SELECT hopper.queue_schedule('sec-root', '* * * * *', 'sec-b', '{"root": true}') IS NOT NULL AS root;
SELECT pg_get_userbyid(owner) = current_user AS root_owned FROM hopper.schedules WHERE name = 'sec-root';
SET ROLE regress_sec_prod;
UPDATE hopper.schedules SET payload = '{"root": "changed"}' WHERE name = 'sec-root';
RESET ROLE;
SELECT name, owner FROM hopper.queue_schedules() WHERE name LIKE 'sec-%' ORDER BY name;
SELECT hopper.schedule_run_due(now() + interval '1 minute') AS pushed;
SELECT queue, payload FROM hopper.jobs WHERE queue LIKE 'sec-%' ORDER BY id;
-- The refused schedules stay due; the run's move of next_run_at keeps the owner.
SELECT name, last_run_at IS NOT NULL AS ran, owner FROM hopper.schedules WHERE name LIKE 'sec-%'
ORDER BY name;
-- A producer's own run pushes its schedules as itself, and leaves those of roles whose rights it
-- lacks (a superuser's) to the reaper, untouched.
SELECT hopper.queue_schedule('sec-root', '* * * * *', 'sec-b', '{"root": true}') IS NOT NULL AS root;
UPDATE hopper.schedules SET next_run_at = now() - interval '1 minute';
SET ROLE regress_sec_prod;
SELECT hopper.schedule_run_due() AS pushed_by_producer;
RESET ROLE;
SELECT name, next_run_at > now() AS moved_on FROM hopper.schedules WHERE name LIKE 'sec-%' ORDER BY name;
SELECT hopper.queue_unschedule('sec-evil'), hopper.queue_unschedule('sec-root');
DROP POLICY sec_prod_a ON hopper.jobs;
ALTER TABLE hopper.jobs DISABLE ROW LEVEL SECURITY;

-- 5. A payload written into hopper.schedules by hand that a push would refuse (a CHECK cannot
-- read hopper.max_payload_bytes) is reported and not pushed when the schedule runs.
SET ROLE regress_sec_prod;
INSERT INTO hopper.schedules (name, cron, queue, payload, next_run_at)
VALUES ('sec-big', '* * * * *', 'sec-a', jsonb_build_object('pad', repeat('x', 2 * 1024 * 1024)),
        now() - interval '1 minute');
RESET ROLE;
SELECT hopper.schedule_run_due(now() + interval '3 minutes') AS pushed;
SELECT count(*) AS big_jobs FROM hopper.jobs WHERE payload ? 'pad';
SELECT last_run_at IS NULL AS still_due FROM hopper.schedules WHERE name = 'sec-big';
SELECT hopper.queue_unschedule('sec-big') AS unscheduled, hopper.queue_unschedule('sec-good') AS good;

-- 6. The owner is a role, not a role's name. A renamed role keeps its schedules (a name that needs
-- quoting too); a dropped role's schedule loses its owner, reported once by a superuser's run,
-- and a role made again under the dropped one's name does not get it.
CREATE ROLE regress_sec_gone IN ROLE hopper_producer;
CREATE ROLE "Regress Sec Renamed" IN ROLE hopper_producer;
SET ROLE regress_sec_gone;
SELECT hopper.queue_schedule('sec-orphan', '* * * * *', 'sec-a', '{"orphan": true}') IS NOT NULL AS orphan;
SET ROLE "Regress Sec Renamed";
SELECT hopper.queue_schedule('sec-renamed', '* * * * *', 'sec-a', '{"renamed": true}') IS NOT NULL AS renamed;
RESET ROLE;
ALTER ROLE "Regress Sec Renamed" RENAME TO "Regress Sec Moved";
DROP ROLE regress_sec_gone;
CREATE ROLE regress_sec_gone IN ROLE hopper_producer;
UPDATE hopper.schedules SET next_run_at = now() - interval '1 minute' WHERE name LIKE 'sec-%';
-- A producer's run leaves the dropped role's schedule alone (only a superuser clears an owner).
SET ROLE regress_sec_gone;
SELECT hopper.schedule_run_due() AS pushed_by_new_role;
RESET ROLE;
SELECT name, owner IS NULL AS no_owner FROM hopper.schedules WHERE name LIKE 'sec-%' ORDER BY name;
-- The OID of the dropped role, in the WARNING's detail, differs from run to run.
\set VERBOSITY terse
SELECT hopper.schedule_run_due(now() + interval '4 minutes') AS pushed;
\set VERBOSITY default
SELECT name, owner FROM hopper.queue_schedules() WHERE name LIKE 'sec-%' ORDER BY name;
-- Left out of the runs from then on: no WARNING at every run.
SELECT hopper.schedule_run_due(now() + interval '5 minutes') AS pushed;
SELECT payload, count(*) FROM hopper.jobs WHERE payload ?| '{orphan, renamed}' GROUP BY 1 ORDER BY 1;
-- A role that changes what it pushes takes it over, as any schedule (a superuser may also give it
-- to a role by name, as README says).
SET ROLE regress_sec_gone;
UPDATE hopper.schedules SET payload = '{"orphan": "adopted"}' WHERE name = 'sec-orphan';
RESET ROLE;
UPDATE hopper.schedules SET owner = 'regress_sec_prod' WHERE name = 'sec-renamed';
SELECT name, owner FROM hopper.queue_schedules() WHERE name LIKE 'sec-%' ORDER BY name;
SELECT hopper.queue_unschedule('sec-orphan'), hopper.queue_unschedule('sec-renamed');
DROP ROLE regress_sec_gone, "Regress Sec Moved";

-- 2. A producer inserts a queue's name and nothing else (a push makes its queue); the settings are
-- queue_create's and the limit functions'.
SET ROLE regress_sec_prod;
SELECT pg_temp.try($$SELECT hopper.queue_push('sec-auto', '{}')$$) AS push_makes_queue;
SELECT pg_temp.try($$INSERT INTO hopper.queues (name, key_max_claims) VALUES ('sec-x', 5)$$) AS rate;
SELECT pg_temp.try($$INSERT INTO hopper.queues (name, max_running) VALUES ('sec-x', 1)$$) AS cap;
SELECT pg_temp.try($$INSERT INTO hopper.queues (name, paused) VALUES ('sec-x', true)$$) AS paused;
SELECT pg_temp.try($$UPDATE hopper.queues SET key_claims_per = '0' WHERE name = 'sec-a'$$) AS per;
RESET ROLE;
-- And no row, by whomever, holds a per-key rate the claims cannot compute: a rate without a
-- period failed every pull of the queue with 23502, a period of 0 with 22012.
\set VERBOSITY sqlstate
INSERT INTO hopper.queues (name, key_max_claims) VALUES ('sec-x', 5);
INSERT INTO hopper.queues (name, key_claims_per) VALUES ('sec-x', '1 minute');
INSERT INTO hopper.queues (name, key_max_claims, key_claims_per) VALUES ('sec-x', 5, '0');
INSERT INTO hopper.queues (name, key_max_claims, key_claims_per) VALUES ('sec-x', 5, '-00:01:00');
INSERT INTO hopper.queues (name, key_max_claims, key_claims_per) VALUES ('sec-x', 5, '745:00:00');
\set VERBOSITY default
-- queue_set_rate_limit's widest period is accepted.
SELECT hopper.queue_set_rate_limit('sec-a', 5, '31 days', each_key => true);
SELECT key_max_claims, key_claims_per FROM hopper.queues WHERE name = 'sec-a';
SELECT hopper.queue_set_rate_limit('sec-a', NULL, NULL, each_key => true);

-- 3. A worker only reads the rate buckets: its pulls spend their tokens, and make the buckets of
-- keys under the per-key default, with the rights of the buckets' owner. A worker that could write
-- them could empty, freeze or lift a queue's rate for every other worker.
SELECT hopper.queue_create('sec-rate') AS created;
SELECT hopper.queue_set_rate_limit('sec-rate', 100, '1 minute');
SELECT hopper.queue_set_rate_limit('sec-rate', 5, '1 minute', concurrency_key => 'k1');
SELECT hopper.queue_set_rate_limit('sec-rate', 10, '1 minute', each_key => true);
SELECT hopper.queue_push('sec-rate', '{}', concurrency_key => 'k1') IS NOT NULL AS pushed,
       hopper.queue_push('sec-rate', '{}', concurrency_key => 'k2') IS NOT NULL AS pushed,
       hopper.queue_push('sec-rate', '{}') IS NOT NULL AS pushed;
SET ROLE regress_sec_work;
SELECT pg_temp.try($$UPDATE hopper.rate_limits SET tokens = 0, refilled_at = 'infinity'
                     WHERE queue = 'sec-rate'$$) AS freeze;
SELECT pg_temp.try($$UPDATE hopper.rate_limits SET tokens = 1e9 WHERE queue = 'sec-rate'$$) AS lift;
SELECT pg_temp.try($$UPDATE hopper.rate_limits SET period = '0' WHERE queue = 'sec-rate'$$) AS period;
-- Nor a bucket of its own making, even one a claim would seed (a key's under the per-key default,
-- drained for good), nor removing one.
SELECT pg_temp.try($$INSERT INTO hopper.rate_limits (queue, concurrency_key, bucket, max_claims,
                                                     period, tokens, refilled_at, from_default)
                     VALUES ('sec-rate', 'k3', 'k:k3', 10, '1 minute', -1000000, now(), true)$$)
    AS seed;
SELECT pg_temp.try($$DELETE FROM hopper.rate_limits WHERE queue = 'sec-rate'$$) AS remove;
-- The claims still spend the queue's bucket and k1's, and make k2's at the per-key rate, full
-- but for the claim. Operators of the worker's own, found before pg_catalog's on its search_path,
-- never run with the buckets' owner's rights: each records the role it ran as.
RESET ROLE;
CREATE SCHEMA regress_sec_ops AUTHORIZATION regress_sec_work;
SET ROLE regress_sec_work;
CREATE TABLE regress_sec_ops.ran (who name, op text);
CREATE FUNCTION regress_sec_ops.f8(op text, a float8, b float8) RETURNS float8 LANGUAGE sql AS $$
    INSERT INTO regress_sec_ops.ran VALUES (current_user, op);
    SELECT CASE op WHEN '+' THEN pg_catalog.float8pl(a, b) WHEN '-' THEN pg_catalog.float8mi(a, b)
                   WHEN '*' THEN pg_catalog.float8mul(a, b) ELSE pg_catalog.float8div(a, b) END
$$;
CREATE FUNCTION regress_sec_ops.f8pl(float8, float8) RETURNS float8 LANGUAGE sql
    AS $$ SELECT regress_sec_ops.f8('+', $1, $2) $$;
CREATE FUNCTION regress_sec_ops.f8mi(float8, float8) RETURNS float8 LANGUAGE sql
    AS $$ SELECT regress_sec_ops.f8('-', $1, $2) $$;
CREATE FUNCTION regress_sec_ops.f8mul(float8, float8) RETURNS float8 LANGUAGE sql
    AS $$ SELECT regress_sec_ops.f8('*', $1, $2) $$;
CREATE FUNCTION regress_sec_ops.f8div(float8, float8) RETURNS float8 LANGUAGE sql
    AS $$ SELECT regress_sec_ops.f8('/', $1, $2) $$;
CREATE FUNCTION regress_sec_ops.texteq(text, text) RETURNS boolean LANGUAGE sql AS $$
    INSERT INTO regress_sec_ops.ran VALUES (current_user, '=');
    SELECT pg_catalog.texteq($1, $2)
$$;
CREATE FUNCTION regress_sec_ops.textcat(text, text) RETURNS text LANGUAGE sql AS $$
    INSERT INTO regress_sec_ops.ran VALUES (current_user, '||');
    SELECT pg_catalog.textcat($1, $2)
$$;
CREATE FUNCTION regress_sec_ops.tsmi(timestamptz, timestamptz) RETURNS interval LANGUAGE sql AS $$
    INSERT INTO regress_sec_ops.ran VALUES (current_user, '-');
    SELECT pg_catalog.timestamptz_mi($1, $2)
$$;
CREATE OPERATOR regress_sec_ops.+ (LEFTARG = float8, RIGHTARG = float8, FUNCTION = regress_sec_ops.f8pl);
CREATE OPERATOR regress_sec_ops.- (LEFTARG = float8, RIGHTARG = float8, FUNCTION = regress_sec_ops.f8mi);
CREATE OPERATOR regress_sec_ops.* (LEFTARG = float8, RIGHTARG = float8, FUNCTION = regress_sec_ops.f8mul);
CREATE OPERATOR regress_sec_ops./ (LEFTARG = float8, RIGHTARG = float8, FUNCTION = regress_sec_ops.f8div);
CREATE OPERATOR regress_sec_ops.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_sec_ops.texteq);
CREATE OPERATOR regress_sec_ops.|| (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_sec_ops.textcat);
CREATE OPERATOR regress_sec_ops.- (LEFTARG = timestamptz, RIGHTARG = timestamptz,
                                   FUNCTION = regress_sec_ops.tsmi);
SET search_path = regress_sec_ops, pg_catalog;
SELECT count(*) AS pulled FROM hopper.queue_pull('sec-rate', 3);
RESET search_path;
RESET ROLE;
SELECT DISTINCT who AS ran_as FROM regress_sec_ops.ran ORDER BY 1;
SET client_min_messages = warning;
DROP SCHEMA regress_sec_ops CASCADE;
RESET client_min_messages;
SELECT bucket, max_claims, period, tokens, from_default FROM hopper.rate_limits
WHERE queue = 'sec-rate' ORDER BY bucket;

-- 4. A push does not remember its queue lookup while row level security applies to hopper.queues:
-- a policy on a session setting let the second push to a queue through after the setting moved.
SELECT hopper.queue_create('sec-ta') AS ta, hopper.queue_create('sec-tb') AS tb;
ALTER TABLE hopper.queues ENABLE ROW LEVEL SECURITY;
CREATE POLICY sec_tenant ON hopper.queues TO regress_sec_prod
    USING (name = current_setting('app.tenant', true));
SET ROLE regress_sec_prod;
SET app.tenant = 'sec-ta';
SELECT pg_temp.try($$SELECT hopper.queue_push('sec-ta', '{}')$$) AS own_tenant;
SELECT pg_temp.try($$SELECT hopper.queue_push('sec-ta', '{}')$$) AS own_tenant_again;
SET app.tenant = 'sec-tb';
SELECT pg_temp.try($$SELECT hopper.queue_push('sec-ta', '{}')$$) AS other_tenant;
SELECT pg_temp.try($$SELECT hopper.queue_push('sec-tb', '{}')$$) AS own_tenant;
RESET app.tenant;
RESET ROLE;
DROP POLICY sec_tenant ON hopper.queues;
ALTER TABLE hopper.queues DISABLE ROW LEVEL SECURITY;
SELECT queue, count(*) FROM hopper.jobs WHERE queue IN ('sec-ta', 'sec-tb') GROUP BY queue ORDER BY queue;

-- 6. Tenants kept apart by row level security: a queue's jobs are in hopper.jobs, in
-- hopper.job_batches while a packed batch holds them, and in hopper.job_history once finished (a
-- take of packed jobs moves them from the second to the third). With one policy on jobs alone, a
-- tenant's packed push, listing and take reached another tenant's queue; with it on all three,
-- none does.
CREATE ROLE regress_sec_tenant IN ROLE hopper_producer, hopper_worker;
SELECT hopper.queue_push('sec-tb', '{"tenant": "b"}') > 0 AS b_pushed;
SET hopper.pack_batches = on;
SELECT count(*) AS b_packed FROM hopper.queue_push_batch('sec-tb',
    ARRAY['{"tenant": "b"}', '{"tenant": "b"}']::jsonb[]);
RESET hopper.pack_batches;
SELECT count(*) AS b_packed_rows FROM hopper.job_batches WHERE queue = 'sec-tb';
BEGIN;
SELECT count(*) AS b_taken FROM hopper.queue_take('sec-tb', 1);
COMMIT;
ALTER TABLE hopper.jobs ENABLE ROW LEVEL SECURITY;
ALTER TABLE hopper.job_batches ENABLE ROW LEVEL SECURITY;
ALTER TABLE hopper.job_history ENABLE ROW LEVEL SECURITY;
CREATE POLICY sec_tenant ON hopper.jobs TO regress_sec_tenant
    USING (queue = 'sec-ta') WITH CHECK (queue = 'sec-ta');
CREATE POLICY sec_tenant ON hopper.job_batches TO regress_sec_tenant
    USING (queue = 'sec-ta') WITH CHECK (queue = 'sec-ta');
CREATE POLICY sec_tenant ON hopper.job_history TO regress_sec_tenant
    USING (queue = 'sec-ta') WITH CHECK (queue = 'sec-ta');
SET ROLE regress_sec_tenant;
SET hopper.pack_batches = on;
SELECT pg_temp.try($$SELECT hopper.queue_push_batch('sec-tb', ARRAY['{}', '{}']::jsonb[])$$)
    AS packed_push_b;
SELECT count(*) AS packed_push_a FROM hopper.queue_push_batch('sec-ta', ARRAY['{}', '{}']::jsonb[]);
RESET hopper.pack_batches;
SELECT count(*) AS listed_b FROM hopper.queue_jobs('sec-tb');
SELECT count(*) AS listed_a FROM hopper.queue_jobs('sec-ta');
BEGIN;
SELECT count(*) AS taken_b FROM hopper.queue_take('sec-tb', 5);
SELECT count(*) AS taken_a FROM hopper.queue_take('sec-ta', 1);
COMMIT;
SELECT count(*) AS pulled_b FROM hopper.queue_pull('sec-tb', 5);
RESET ROLE;
DROP POLICY sec_tenant ON hopper.jobs;
DROP POLICY sec_tenant ON hopper.job_batches;
DROP POLICY sec_tenant ON hopper.job_history;
ALTER TABLE hopper.jobs DISABLE ROW LEVEL SECURITY;
ALTER TABLE hopper.job_batches DISABLE ROW LEVEL SECURITY;
ALTER TABLE hopper.job_history DISABLE ROW LEVEL SECURITY;
-- sec-tb kept its available job and nothing of the tenant's.
SELECT state, count(*) FROM hopper.queue_jobs('sec-tb') GROUP BY state ORDER BY state;
DROP ROLE regress_sec_tenant;

SELECT hopper.queue_drop('sec-a'), hopper.queue_drop('sec-b'), hopper.queue_drop('sec-auto'),
       hopper.queue_drop('sec-rate'), hopper.queue_drop('sec-ta'), hopper.queue_drop('sec-tb');
DROP ROLE regress_sec_prod, regress_sec_work;
SELECT hopper.reaper_start() AS reaper_started;
