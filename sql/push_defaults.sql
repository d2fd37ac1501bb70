-- A push takes max_attempts from its queue unless given one, reads the queue as a statement of its
-- transaction would (its own earlier changes included), and needs what reading it through SQL needs:
-- SELECT on hopper.queues (or on the columns it reads), through row level security if enabled.
SET hopper.notify = off;
\i sql/include/try.sql
GRANT EXECUTE ON FUNCTION pg_temp.try(text) TO PUBLIC;

SELECT hopper.queue_create('pd', max_attempts => 7) AS created;
SELECT hopper.queue_push('pd', '{}') AS id \gset
SELECT max_attempts FROM hopper.jobs WHERE id = :id;
SELECT hopper.queue_push('pd', '{}', max_attempts => 2) AS id \gset
SELECT max_attempts FROM hopper.jobs WHERE id = :id;
SELECT hopper.queue_push('pd', '{}', dedup_key => 'k') AS id \gset
SELECT max_attempts FROM hopper.jobs WHERE id = :id;

-- The push remembers a queue's max_attempts; a change to the queue makes it forget, whether made
-- through the API or by hand.
SELECT hopper.queue_create('pd', max_attempts => 4) AS created;
SELECT hopper.queue_push('pd', '{}') AS id \gset
SELECT max_attempts FROM hopper.jobs WHERE id = :id;
UPDATE hopper.queues SET max_attempts = 7 WHERE name = 'pd';
SELECT hopper.queue_push('pd', '{}') AS id \gset
SELECT max_attempts FROM hopper.jobs WHERE id = :id;

-- A queue created in a transaction or subtransaction that rolled back is forgotten with it.
BEGIN;
SELECT hopper.queue_create('pd-gone') AS created;
SELECT hopper.queue_push('pd-gone', '{}') IS NOT NULL AS pushed;
ROLLBACK;
SET hopper.auto_create_queues = off;
SELECT pg_temp.try($$SELECT hopper.queue_push('pd-gone', '{}')$$) AS push_after_rollback;
BEGIN;
SAVEPOINT s;
SELECT hopper.queue_create('pd-gone') AS created;
SELECT hopper.queue_push('pd-gone', '{}') IS NOT NULL AS pushed;
ROLLBACK TO SAVEPOINT s;
SELECT pg_temp.try($$SELECT hopper.queue_push('pd-gone', '{}')$$) AS push_after_savepoint_rollback;
COMMIT;
RESET hopper.auto_create_queues;

-- Changes of this transaction count, whatever the isolation level.
BEGIN ISOLATION LEVEL REPEATABLE READ;
UPDATE hopper.queues SET max_attempts = 9 WHERE name = 'pd';
SELECT hopper.queue_push('pd', '{}') AS id \gset
SELECT max_attempts FROM hopper.jobs WHERE id = :id;
SELECT hopper.queue_create('pd-new', max_attempts => 3) AS created;
SELECT hopper.queue_push('pd-new', '{}') AS id \gset
SELECT max_attempts FROM hopper.jobs WHERE id = :id;
ROLLBACK;
SELECT hopper.queue_push('pd', '{}') AS id \gset
SELECT max_attempts FROM hopper.jobs WHERE id = :id;

-- A queue dropped earlier in the transaction is gone for the push.
BEGIN;
SELECT hopper.queue_drop('pd') AS dropped;
SET LOCAL hopper.auto_create_queues = off;
SELECT pg_temp.try($$SELECT hopper.queue_push('pd', '{}')$$) AS push_to_dropped;
ROLLBACK;

-- Auto-created queues take the default.
SELECT hopper.queue_push('pd-auto', '{}') AS id \gset
SELECT max_attempts FROM hopper.jobs WHERE id = :id;

-- Privileges on hopper.queues.
CREATE ROLE regress_hopper_pd;
GRANT hopper_producer TO regress_hopper_pd;
REVOKE SELECT ON hopper.queues FROM hopper_producer;
-- What a superuser's push remembered is not the role's to use.
SELECT hopper.queue_push('pd', '{}') IS NOT NULL AS superuser_pushed;
SET ROLE regress_hopper_pd;
SELECT pg_temp.try($$SELECT hopper.queue_push('pd', '{}')$$) AS push_without_select;
RESET ROLE;
-- Nor is what a role remembered while it was a superuser, once it is not one any more.
CREATE ROLE regress_hopper_pd_su SUPERUSER;
GRANT hopper_producer TO regress_hopper_pd_su;
SET ROLE regress_hopper_pd_su;
SELECT hopper.queue_push('pd', '{}') IS NOT NULL AS pushed_as_superuser;
RESET ROLE;
ALTER ROLE regress_hopper_pd_su NOSUPERUSER;
SET ROLE regress_hopper_pd_su;
SELECT pg_temp.try($$SELECT hopper.queue_push('pd', '{}')$$) AS push_after_nosuperuser;
RESET ROLE;
GRANT SELECT (name, max_attempts) ON hopper.queues TO hopper_producer;
SET ROLE regress_hopper_pd;
SELECT pg_temp.try($$SELECT hopper.queue_push('pd', '{}')$$) AS push_with_column_select;
RESET ROLE;
REVOKE SELECT (name, max_attempts) ON hopper.queues FROM hopper_producer;
GRANT SELECT ON hopper.queues TO hopper_producer;

-- Row level security: a queue the policy hides does not exist for the push.
ALTER TABLE hopper.queues ENABLE ROW LEVEL SECURITY;
CREATE POLICY regress_pd_hide ON hopper.queues FOR SELECT USING (name <> 'pd');
SELECT hopper.queue_push('pd', '{}') IS NOT NULL AS superuser_pushed;
SET ROLE regress_hopper_pd;
SET hopper.auto_create_queues = off;
SELECT pg_temp.try($$SELECT hopper.queue_push('pd', '{}')$$) AS push_to_hidden;
SELECT pg_temp.try($$SELECT hopper.queue_push('pd-auto', '{}')$$) AS push_to_visible;
RESET hopper.auto_create_queues;
RESET ROLE;
-- A role that bypassed the policy and no longer does: the queue is hidden from its next push.
ALTER ROLE regress_hopper_pd_su BYPASSRLS;
SET ROLE regress_hopper_pd_su;
SET hopper.auto_create_queues = off;
SELECT hopper.queue_push('pd', '{}') IS NOT NULL AS pushed_bypassing;
RESET ROLE;
ALTER ROLE regress_hopper_pd_su NOBYPASSRLS;
SET ROLE regress_hopper_pd_su;
SELECT pg_temp.try($$SELECT hopper.queue_push('pd', '{}')$$) AS push_after_nobypassrls;
RESET hopper.auto_create_queues;
RESET ROLE;
DROP POLICY regress_pd_hide ON hopper.queues;
ALTER TABLE hopper.queues DISABLE ROW LEVEL SECURITY;

-- The push needs INSERT and SELECT on hopper.jobs, as its INSERT ... RETURNING id would.
REVOKE INSERT ON hopper.jobs FROM hopper_producer;
SET ROLE regress_hopper_pd;
SELECT pg_temp.try($$SELECT hopper.queue_push('pd', '{}')$$) AS push_without_insert;
SELECT pg_temp.try($$SELECT hopper.queue_push_batch('pd', ARRAY['{}', '{}']::jsonb[])$$)
    AS batch_without_insert;
RESET ROLE;
GRANT INSERT ON hopper.jobs TO hopper_producer;

-- A partial index added by hand, after this session has pushed (its pushes keep the predicates of
-- hopper.jobs' partial indexes prepared), takes the jobs its predicate admits and no others; after
-- it is dropped, pushes go on.
SELECT hopper.queue_push('pd', '{"u": 1}') IS NOT NULL AS pushed_before_index;
CREATE UNIQUE INDEX regress_pd_unique_u ON hopper.jobs ((payload->>'u')) WHERE payload ? 'u';
SELECT pg_temp.try($$SELECT hopper.queue_push('pd', '{"u": 1}')$$) AS same_u;
SELECT pg_temp.try($$SELECT hopper.queue_push('pd', '{"v": 1}')$$) AS no_u;
SELECT pg_temp.try($$SELECT hopper.queue_push('pd', '{"v": 1}')$$) AS no_u_again;
DROP INDEX hopper.regress_pd_unique_u;
SELECT pg_temp.try($$SELECT hopper.queue_push('pd', '{"u": 1}')$$) AS same_u_after_drop;
DELETE FROM hopper.jobs WHERE queue = 'pd' AND payload ?| ARRAY['u', 'v'];

-- A batch of rows: in payload order, ids ascending, with the batch's settings and each job's
-- concurrency key; max_attempts from the batch or else the queue.
SELECT hopper.queue_create('pd-batch', max_attempts => 7);
CREATE TEMP TABLE regress_pd_pushed AS
SELECT id, row_number() OVER () AS slot
FROM hopper.queue_push_batch('pd-batch', ARRAY['{"s": 1}', '{"s": 2}', '{"s": 3}']::jsonb[],
                             priority => 2, kind => 'k',
                             concurrency_keys => ARRAY['a', NULL, 'b']) AS t(id);
SELECT p.slot, j.payload, j.priority, j.kind, j.max_attempts, j.concurrency_key, j.state,
       j.run_at = j.created_at AS due_at_push,
       j.id = (SELECT min(id) FROM regress_pd_pushed) + p.slot - 1 AS ascending
FROM regress_pd_pushed p JOIN hopper.jobs j ON j.id = p.id ORDER BY p.slot;
TRUNCATE regress_pd_pushed;
INSERT INTO regress_pd_pushed
SELECT id, 0 FROM hopper.queue_push_batch('pd-batch', ARRAY['{}', '{}']::jsonb[], max_attempts => 3) id;
SELECT j.max_attempts FROM regress_pd_pushed p JOIN hopper.jobs j ON j.id = p.id;
-- More rows than one write holds (100): all of them, in payload order, each found through the
-- primary key and the pull index.
TRUNCATE regress_pd_pushed;
INSERT INTO regress_pd_pushed
SELECT id, row_number() OVER ()
FROM hopper.queue_push_batch('pd-batch',
         ARRAY(SELECT pg_catalog.jsonb_build_object('s', g) FROM generate_series(1, 250) g)) id;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT count(*) AS pushed, count(*) FILTER (WHERE (j.payload->>'s')::bigint = p.slot) AS in_order,
       count(*) FILTER (WHERE j.id = (SELECT min(id) FROM regress_pd_pushed) + p.slot - 1)
           AS ascending
FROM regress_pd_pushed p JOIN hopper.jobs j ON j.id = p.id;
-- Through jobs_pull_idx: these 250 and the three pushed above with the queue's max_attempts.
SELECT count(*) AS in_pull_index FROM hopper.jobs
WHERE queue = 'pd-batch' AND state = 'available' AND max_attempts = 7;
RESET enable_seqscan;
RESET enable_bitmapscan;
-- A unique index added by hand holds within a batch too: a duplicate fails the whole batch.
CREATE UNIQUE INDEX regress_pd_unique_u ON hopper.jobs ((payload->>'u')) WHERE payload ? 'u';
SELECT pg_temp.try($$SELECT hopper.queue_push_batch('pd-batch',
    ARRAY['{"u": 1}', '{"v": 1}', '{"u": 1}']::jsonb[])$$) AS duplicate_in_batch;
SELECT count(*) AS kept FROM hopper.jobs WHERE queue = 'pd-batch' AND payload ?| ARRAY['u', 'v'];
DROP INDEX hopper.regress_pd_unique_u;
DROP TABLE regress_pd_pushed;
SELECT hopper.queue_drop('pd-batch');

-- A trigger added to hopper.jobs by hand fires for every push, and a policy applies.
CREATE TABLE regress_pd_seen (id bigint, queue text);
CREATE FUNCTION regress_pd_seen() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO regress_pd_seen VALUES (NEW.id, NEW.queue);
    RETURN NEW;
END $$;
CREATE TRIGGER regress_pd_seen AFTER INSERT ON hopper.jobs
    FOR EACH ROW EXECUTE FUNCTION regress_pd_seen();
SELECT hopper.queue_push('pd', '{}') AS id \gset
SELECT count(*) AS trigger_saw_push FROM regress_pd_seen WHERE id = :id;
SELECT count(*) AS batch_pushed FROM hopper.queue_push_batch('pd', ARRAY['{"b": 1}', '{"b": 2}', '{"b": 3}']::jsonb[]);
SELECT count(*) AS trigger_saw_batch FROM regress_pd_seen WHERE id > :id;
DROP TRIGGER regress_pd_seen ON hopper.jobs;
DROP FUNCTION regress_pd_seen();
DROP TABLE regress_pd_seen;
ALTER TABLE hopper.jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY regress_pd_read ON hopper.jobs FOR SELECT USING (true);
CREATE POLICY regress_pd_no_pd ON hopper.jobs FOR INSERT WITH CHECK (queue <> 'pd');
SET ROLE regress_hopper_pd;
SELECT pg_temp.try($$SELECT hopper.queue_push('pd', '{}')$$) AS push_against_policy;
SELECT pg_temp.try($$SELECT hopper.queue_push('pd-auto', '{}')$$) AS push_within_policy;
SELECT pg_temp.try($$SELECT hopper.queue_push_batch('pd', ARRAY['{}', '{}']::jsonb[])$$) AS batch_against_policy;
SELECT pg_temp.try($$SELECT hopper.queue_push_batch('pd-auto', ARRAY['{}', '{}']::jsonb[])$$) AS batch_within_policy;
RESET ROLE;
DROP POLICY regress_pd_read ON hopper.jobs;
DROP POLICY regress_pd_no_pd ON hopper.jobs;
ALTER TABLE hopper.jobs DISABLE ROW LEVEL SECURITY;

SELECT queue, count(*) FROM hopper.jobs WHERE queue LIKE 'pd%' GROUP BY queue ORDER BY queue;
SELECT hopper.queue_drop('pd'), hopper.queue_drop('pd-auto');
DROP ROLE regress_hopper_pd;
DROP ROLE regress_hopper_pd_su;
