-- The direct paths (push, claims, completions through the access methods) know the columns and
-- the pull index the install script made. What an operator changes must not be lost: a column
-- added to hopper.jobs keeps its default and its value through a lease, and a pull index built
-- another way still gives jobs in pull order. Each change is rolled back at the end.
SET hopper.notify = off;

SELECT hopper.queue_create('schema_q') AS created;
-- This session pushes before the table changes, so its pushes' column map is already remembered.
SELECT hopper.queue_create('schema_warm') AS created;
SELECT hopper.queue_push('schema_warm', '{}') IS NOT NULL AS pushed;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('schema_warm', ARRAY['{}', '{}']::jsonb[]);

-- A column of the operator's own, NOT NULL with a default.
BEGIN;
ALTER TABLE hopper.jobs ADD COLUMN tenant text NOT NULL DEFAULT 'acme';
SELECT hopper.queue_push('schema_q', '{"n": 1}') IS NOT NULL AS pushed;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('schema_q',
    ARRAY['{"n": 2}', '{"n": 3}']::jsonb[]);
SELECT payload->>'n' AS n, tenant FROM hopper.jobs WHERE queue = 'schema_q' ORDER BY id;
UPDATE hopper.jobs SET tenant = 'globex' WHERE queue = 'schema_q' AND payload->>'n' = '1';
-- A lease keeps the column's value; a take and a completion move the job to history as usual.
CREATE TEMP TABLE leased AS SELECT * FROM hopper.queue_pull('schema_q', 1);
SELECT payload->>'n' AS n, state, tenant FROM hopper.jobs
WHERE id = (SELECT id FROM leased);
SELECT hopper.queue_complete(id, lease_token) AS completed FROM leased;
SELECT payload->>'n' AS n FROM hopper.queue_take('schema_q', 1);
SELECT payload->>'n' AS n, state FROM hopper.job_history WHERE queue = 'schema_q' ORDER BY id;
SELECT payload->>'n' AS n, state, tenant FROM hopper.jobs WHERE queue = 'schema_q';
ROLLBACK;


-- A pull index in another column order: claims still come in pull order (priority, then
-- run_at, then id), and the lease and completion still land.
BEGIN;
DROP INDEX hopper.jobs_pull_idx;
CREATE INDEX jobs_pull_idx ON hopper.jobs (queue, run_at, priority, id)
    WHERE state = 'available';
SELECT count(*) AS pushed FROM hopper.queue_push_batch('schema_q',
    ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[],
    priority => 0, run_at => now() - interval '1 minute');
SELECT hopper.queue_push('schema_q', '{"n": 4}', priority => -1) IS NOT NULL AS pushed;
CREATE TEMP TABLE pulled AS SELECT * FROM hopper.queue_pull('schema_q', 2);
SELECT payload->>'n' AS n, attempt FROM pulled ORDER BY id;
SELECT count(hopper.queue_complete(id, lease_token)) AS completed FROM pulled;
SELECT payload->>'n' AS n FROM hopper.queue_take('schema_q', 5) ORDER BY id;
SELECT count(*) AS left_in_jobs FROM hopper.jobs WHERE queue = 'schema_q';
ROLLBACK;
SELECT indexdef FROM pg_indexes WHERE indexname = 'jobs_pull_idx';

-- A pull index rebuilt with a descending priority, outside a transaction, so that the direct
-- claims see it: the claims still come in pull order (the statements claim; an index scan in the
-- index's own order took priority 5 first, and the claim position it left passed over the rest).
-- In a database of its own, with a fresh extension.
\set own_db hopper_direct_schema
\i sql/include/new_database.sql
CREATE EXTENSION hopper;
SET hopper.notify = off;
DROP INDEX hopper.jobs_pull_idx;
CREATE INDEX jobs_pull_idx ON hopper.jobs (queue, priority DESC, run_at, id)
    WHERE state = 'available';
SELECT hopper.queue_push('schema_desc', '{"n": 0}', priority => 0) IS NOT NULL AS pushed;
SELECT hopper.queue_push('schema_desc', '{"n": 5}', priority => 5) IS NOT NULL AS pushed;
SELECT hopper.queue_push('schema_desc', '{"n": -1}', priority => -1) IS NOT NULL AS pushed;
SELECT payload->>'n' AS first FROM hopper.queue_pull('schema_desc', 1);
SELECT payload->>'n' AS second FROM hopper.queue_pull('schema_desc', 1);
SELECT payload->>'n' AS third FROM hopper.queue_pull('schema_desc', 1);
-- Under a nondeterministic collation, where 'Video' equals 'video': a claim of one queue never
-- takes the other's jobs.
CREATE COLLATION regress_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
DROP INDEX hopper.jobs_pull_idx;
CREATE INDEX jobs_pull_idx ON hopper.jobs (queue COLLATE regress_ci, priority, run_at, id)
    WHERE state = 'available';
SELECT hopper.queue_push('Video', '{"q": "Video"}') IS NOT NULL AS pushed;
SELECT hopper.queue_push('video', '{"q": "video"}') IS NOT NULL AS pushed;
SELECT queue, payload->>'q' AS q FROM hopper.queue_pull('video', 5);
SELECT queue, payload->>'q' AS q FROM hopper.queue_take('Video', 5);
-- Without the predicate, a claim would lock running jobs before passing them over; it leaves
-- the claim to the statements, which take only available ones.
DROP INDEX hopper.jobs_pull_idx;
CREATE INDEX jobs_pull_idx ON hopper.jobs (queue, priority, run_at, id);
SELECT hopper.queue_push('schema_desc', '{"n": 6}') IS NOT NULL AS pushed;
SELECT payload->>'n' AS n FROM hopper.queue_pull('schema_desc', 5);
DROP INDEX hopper.jobs_pull_idx;
CREATE INDEX jobs_pull_idx ON hopper.jobs (queue, priority, run_at, id)
    WITH (deduplicate_items = off) WHERE state = 'available';
DROP COLLATION regress_ci;
SELECT hopper.queue_drop(q) AS dropped FROM unnest(ARRAY['schema_desc', 'Video', 'video']) q;
-- A packed row index rebuilt descending: packed rows still come in pull order.
SET hopper.pack_batches = on;
DROP INDEX hopper.job_batches_pull_idx;
CREATE INDEX job_batches_pull_idx ON hopper.job_batches (queue, priority DESC, run_at, first_id);
SELECT count(*) AS pushed FROM hopper.queue_push_batch('schema_packed',
    ARRAY['{"n": "later"}', '{"n": "later"}']::jsonb[], priority => 5);
SELECT count(*) AS pushed FROM hopper.queue_push_batch('schema_packed',
    ARRAY['{"n": "urgent"}', '{"n": "urgent"}']::jsonb[], priority => -1);
SELECT string_agg(payload->>'n', ' ' ORDER BY ordinality) AS taken
FROM hopper.queue_take('schema_packed', 2) WITH ORDINALITY;
RESET hopper.pack_batches;
DROP INDEX hopper.job_batches_pull_idx;
CREATE INDEX job_batches_pull_idx ON hopper.job_batches (queue, priority, run_at, first_id);
SELECT hopper.queue_drop('schema_packed') AS dropped;
-- A column of the operator's own in both tables, outside a transaction so that the direct paths
-- see it, history's with a default of its own: hopper does not copy columns it did not make, on
-- either path, so every history row gets the default (a completion and a take through the access
-- methods, a take with a kinds filter through the statements).
ALTER TABLE hopper.jobs ADD COLUMN tenant text NOT NULL DEFAULT 'acme';
ALTER TABLE hopper.job_history ADD COLUMN tenant text NOT NULL DEFAULT 'unknown';
SELECT count(*) AS pushed FROM hopper.queue_push_batch('schema_tenant',
    ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[], kind => 'k');
SELECT count(hopper.queue_complete(id, lease_token)) AS completed
FROM hopper.queue_pull('schema_tenant', 1);
SELECT count(*) AS taken FROM hopper.queue_take('schema_tenant', 1);
SELECT count(*) AS taken FROM hopper.queue_take('schema_tenant', 1, kinds => ARRAY['k']);
SELECT payload->>'n' AS n, state, tenant FROM hopper.job_history WHERE queue = 'schema_tenant'
ORDER BY id;
\c :regression_db
DROP DATABASE :"own_db" WITH (FORCE);
SET hopper.notify = off;

-- A column renamed and another made under its old name, after this session's paths have
-- looked their columns up: a lease writes the worker into the new column, a completion copies it
-- from there into history.
SELECT hopper.queue_push('schema_q', '{"n": 5}') IS NOT NULL AS pushed;
SELECT count(hopper.queue_complete(id, lease_token)) AS completed
FROM hopper.queue_pull('schema_q', 1, worker => 'w-before');
BEGIN;
ALTER TABLE hopper.jobs RENAME COLUMN worker TO worker_before;
ALTER TABLE hopper.jobs ADD COLUMN worker text;
SELECT hopper.queue_push('schema_q', '{"n": 6}') IS NOT NULL AS pushed;
CREATE TEMP TABLE renamed AS SELECT * FROM hopper.queue_pull('schema_q', 1, worker => 'w-new');
SELECT worker, worker_before FROM hopper.jobs WHERE id = (SELECT id FROM renamed);
SELECT hopper.queue_complete(id, lease_token) AS completed FROM renamed;
SELECT worker FROM hopper.job_history WHERE id = (SELECT id FROM renamed);
ROLLBACK;

-- A column renamed after this session's pushes mapped the table: the push does not write the job's
-- kind into the renamed column; it goes to the SQL INSERT, which finds no "kind".
SELECT hopper.queue_push('schema_warm', '{}') IS NOT NULL AS pushed;
BEGIN;
ALTER TABLE hopper.jobs RENAME COLUMN kind TO kind_before;
\set VERBOSITY terse
SELECT hopper.queue_push('schema_warm', '{}', kind => 'k') IS NOT NULL AS pushed;
\set VERBOSITY default
ROLLBACK;

SELECT hopper.queue_drop('schema_warm') AS dropped;
