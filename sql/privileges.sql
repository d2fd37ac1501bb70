-- Privileges: nothing is executable by PUBLIC; hopper_producer may push and read status,
-- hopper_worker may pull and finish jobs. Functions run as the caller.
SET hopper.notify = off;
\i sql/include/try.sql
GRANT EXECUTE ON FUNCTION pg_temp.try(text) TO PUBLIC;
\i sql/include/wait_for.sql

SELECT rolname FROM pg_roles WHERE rolname IN ('hopper_producer', 'hopper_worker') ORDER BY 1;
SELECT count(*) AS public_executable
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE n.nspname = 'hopper' AND has_function_privilege('public', p.oid, 'EXECUTE');

CREATE ROLE regress_hopper_app;
GRANT hopper_producer TO regress_hopper_app;
CREATE ROLE regress_hopper_worker;
GRANT hopper_worker TO regress_hopper_worker;
CREATE ROLE regress_hopper_nobody;
SELECT hopper.queue_create('priv') AS created;

SET ROLE regress_hopper_app;
SELECT pg_temp.try($$SELECT hopper.queue_push('priv', '{"from": "app"}')$$) AS app_push;
SELECT pg_temp.try($$SELECT count(*) FROM hopper.queue_push_batch('priv', ARRAY['{}']::jsonb[])$$) AS app_batch;
SELECT pg_temp.try($$SELECT hopper.queue_push('priv-auto', '{}')$$) AS app_push_new_queue;
SELECT pg_temp.try($$SELECT * FROM hopper.queue_stats('priv')$$) AS app_stats;
SELECT pg_temp.try($$SELECT * FROM hopper.queue_pull('priv')$$) AS app_pull;
SELECT pg_temp.try($$SELECT hopper.queue_drop('priv')$$) AS app_drop;

-- A producer may insert queues itself (a push makes its queue), but only their names, and no name
-- the functions would refuse: the reaper, a superuser, sends a NOTIFY per queue name. The other
-- settings are the extension owner's (sql/security.sql).
\set VERBOSITY sqlstate
INSERT INTO hopper.queues (name) VALUES (repeat('z', 70));
INSERT INTO hopper.queues (name) VALUES ('done');
INSERT INTO hopper.queues (name, retention) VALUES ('evil', '1000000 years');
INSERT INTO hopper.queues (name, lease) VALUES ('evil', '0');
\set VERBOSITY default
SELECT pg_temp.try($$INSERT INTO hopper.queues (name) VALUES ('priv-direct')$$) AS app_inserts_queue;
-- Nor strand packed jobs: a mark it clears by hand is set again by the reaper's next pass.
SET hopper.pack_batches = on;
SELECT count(*) AS packed_push FROM hopper.queue_push_batch('priv-packed', ARRAY['{}', '{}']::jsonb[]);
RESET hopper.pack_batches;
UPDATE hopper.queues SET packed = false WHERE name = 'priv-packed';
RESET ROLE;
SELECT pg_temp.wait_for($$(SELECT packed FROM hopper.queues WHERE name = 'priv-packed')$$)
    AS marked_again;
SELECT count(*) AS pulled FROM hopper.queue_pull('priv-packed', 5);
SET ROLE regress_hopper_app;

SET ROLE regress_hopper_worker;
SELECT pg_temp.try($$
    SELECT hopper.queue_complete(id, lease_token, '{"done": true}') FROM hopper.queue_pull('priv', 1)$$)
    AS worker_pull_complete;
SELECT pg_temp.try($$
    SELECT hopper.queue_fail(id, lease_token, 'no') FROM hopper.queue_pull('priv', 1)$$) AS worker_pull_fail;
SELECT pg_temp.try($$SELECT hopper.queue_push('priv', '{}')$$) AS worker_push;
-- A pull's at is for tests: a worker's moves the claim's clock, not the clock by which other
-- workers' leases run out. A live lease of an hour is not taken over by a pull dated two hours
-- ahead (a superuser's is, as sql/fencing.sql shows).
RESET ROLE;
SELECT hopper.queue_push('priv-lease', '{}') AS leased \gset
SELECT count(*) AS pulled FROM hopper.queue_pull('priv-lease', 1, lease => '1 hour');
SET ROLE regress_hopper_worker;
SELECT count(*) AS taken_over FROM hopper.queue_pull('priv-lease', 1, at => now() + interval '2 hours');
SELECT count(*) AS taken_over FROM hopper.queue_take('priv-lease', 1, at => now() + interval '2 hours');
RESET ROLE;
SELECT state, attempt FROM hopper.jobs WHERE id = :leased;
SELECT hopper.queue_drop('priv-lease') AS dropped;
SET ROLE regress_hopper_worker;

SET ROLE regress_hopper_nobody;
SELECT pg_temp.try($$SELECT hopper.queue_push('priv', '{}')$$) AS nobody_push;
SELECT pg_temp.try($$SELECT * FROM hopper.queue_pull('priv')$$) AS nobody_pull;
SELECT pg_temp.try($$SELECT * FROM hopper.jobs$$) AS nobody_reads_table;

RESET ROLE;
SELECT available, scheduled, running, completed, dead FROM hopper.queue_stats('priv');
SELECT hopper.queue_drop('priv'), hopper.queue_drop('priv-auto'), hopper.queue_drop('priv-direct'),
       hopper.queue_drop('priv-packed');
DROP ROLE regress_hopper_app, regress_hopper_worker, regress_hopper_nobody;
