-- A completion in the session that leased the job reads the row where the lease left it, when that
-- is still the job's current version under the same lease; otherwise it finds the row by its id,
-- as any other completion does. Whatever happened to the row in between, the outcome is the one
-- the id gives.
--
-- In a database of its own, so that hopper.jobs holds only this test's rows and a freed place is
-- taken by the next insert.
\set own_db hopper_lease_rows
\i sql/include/own_database.sql
SET hopper.notify = off;
\i sql/include/try.sql
SELECT hopper.queue_create('lr') AS created;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('lr',
    ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series(1, 6) g));

-- Leased and completed at once: the job goes to history, once.
SELECT id, lease_token AS tok FROM hopper.queue_pull('lr', 1) \gset
SELECT hopper.queue_complete(:id, :tok) AS completed;
SELECT hopper.queue_complete(:id, :tok) AS completed_again;
SELECT state, payload->>'n' AS n FROM hopper.job_history WHERE id = :id;

-- A heartbeat and a progress report write newer versions: the completion finds the newest.
SELECT id, lease_token AS tok FROM hopper.queue_pull('lr', 1) \gset
SELECT hopper.queue_heartbeat(:id, :tok) AS beat;
SELECT hopper.queue_progress(:id, :tok, 0.5) AS progressed;
SELECT hopper.queue_complete(:id, :tok) AS completed;
SELECT state, progress FROM hopper.job_history WHERE id = :id;

-- A lease rolled back: its token completes nothing. The job is leased again under another token;
-- the first token is still refused and the second completes it.
BEGIN;
SELECT id, lease_token AS tok FROM hopper.queue_pull('lr', 1) \gset
ROLLBACK;
SELECT hopper.queue_complete(:id, :tok) AS rolled_back_lease;
SELECT state FROM hopper.jobs WHERE id = :id;
SELECT lease_token AS tok2 FROM hopper.queue_pull('lr', 1) WHERE id = :id \gset
SELECT :tok2 <> :tok AS new_token;
SELECT hopper.queue_complete(:id, :tok) AS old_token;
SELECT hopper.queue_complete(:id, :tok2) AS completed;

-- The lease lost to a rescue and the job leased by another worker: the first holder's token is
-- refused, the job stays with the new holder.
SELECT id, lease_token AS tok FROM hopper.queue_pull('lr', 1) \gset
UPDATE hopper.jobs SET state = 'available', lease_token = NULL, lease_until = NULL
WHERE id = :id;
SELECT lease_token AS tok2 FROM hopper.queue_pull('lr', 1) \gset
SELECT hopper.queue_complete(:id, :tok) AS lost_lease;
SELECT state, lease_token = :tok2 AS new_holder FROM hopper.jobs WHERE id = :id;
SELECT hopper.queue_complete(:id, :tok2) AS completed;

-- The row gone, VACUUM freed its place and a new job took it: the address now holds another job,
-- which the completion leaves alone.
SELECT hopper.queue_push('lr', '{"first": true}', priority => -1) AS id \gset
SELECT hopper.queue_push('lr', '{"stays": true}') IS NOT NULL AS pushed;
SELECT lease_token AS tok FROM hopper.queue_pull('lr', 1) WHERE id = :id \gset
CREATE TEMP TABLE leased AS SELECT ctid AS at FROM hopper.jobs WHERE id = :id;
DELETE FROM hopper.jobs WHERE id = :id;
VACUUM hopper.jobs;
-- New jobs fill the page's freed places in order until one lands at the lease's address.
CREATE TEMP TABLE newcomers (id bigint);
DO $$
BEGIN
    FOR g IN 1..200 LOOP
        INSERT INTO newcomers SELECT hopper.queue_push('lr', jsonb_build_object('newcomer', g));
        EXIT WHEN EXISTS (SELECT 1 FROM hopper.jobs j JOIN newcomers n USING (id)
                          WHERE j.ctid = (SELECT at FROM leased));
    END LOOP;
END $$;
SELECT count(*) AS newcomer_at_that_address
FROM hopper.jobs j JOIN newcomers n USING (id) WHERE j.ctid = (SELECT at FROM leased);
-- The job was issued, so the late completion answers as a lost lease does.
SELECT hopper.queue_complete(:id, :tok) AS after_reuse;
SELECT count(*) FILTER (WHERE j.state = 'available') = count(*) AS newcomers_all_waiting
FROM hopper.jobs j JOIN newcomers n USING (id);
DROP TABLE newcomers, leased;

-- The row gone and the table truncated behind it by VACUUM: the address the lease left points
-- past the end of the table, and the completion answers that the lease is lost.
SELECT count(*) AS pushed FROM hopper.queue_push_batch('lr',
    ARRAY(SELECT jsonb_build_object('pad', repeat('x', 1000)) FROM generate_series(1, 200)));
SELECT hopper.queue_push('lr', '{"last": true}', priority => -1) IS NOT NULL AS pushed;
SELECT id, lease_token AS tok FROM hopper.queue_pull('lr', 1) \gset
SELECT (ctid::text::point)[0]::bigint AS block FROM hopper.jobs WHERE id = :id \gset
DELETE FROM hopper.jobs WHERE queue = 'lr';
VACUUM hopper.jobs;
SELECT pg_relation_size('hopper.jobs') / current_setting('block_size')::int <= :block
    AS truncated_past_the_row;
SELECT hopper.queue_complete(:id, :tok) AS after_truncation;

SELECT hopper.queue_drop('lr') AS dropped;
\c :regression_db
DROP DATABASE :"own_db";
