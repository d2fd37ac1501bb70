-- The direct paths (pushes, claims and completions through the access methods) write and read
-- hopper's columns as the types the install script gave them. An operator who changes a column's
-- type or typmod gets the SQL statements instead, which cast the values or refuse them as an
-- INSERT would; never a value of the wrong type stored or read (which crashed the backend that
-- read it). A database of its own: the claims here must take the direct paths.
\set own_db hopper_column_types
\i sql/include/new_database.sql
CREATE EXTENSION hopper;
SET hopper.notify = off;
\set VERBOSITY terse
SELECT hopper.queue_create('types_q') AS created;
-- Every direct path has run once, so its layout is remembered before the table changes.
SELECT hopper.queue_push('types_q', '{"n": 0}') IS NOT NULL AS pushed;
SELECT count(hopper.queue_complete(id, lease_token)) AS completed
FROM hopper.queue_pull('types_q', 1);
SELECT hopper.queue_push('types_q', '{"n": 0}') IS NOT NULL AS pushed;
SELECT count(*) AS taken FROM hopper.queue_take('types_q', 1);

-- payload as text: the push goes through the INSERT, which stores the json text. Claims cannot
-- return a text payload as jsonb and say so; none returns what it does not hold.
SELECT hopper.queue_push('types_q', '{"n": 1}') IS NOT NULL AS pushed;
ALTER TABLE hopper.jobs ALTER COLUMN payload TYPE text USING payload::text;
SELECT hopper.queue_push('types_q', '{"n": 2}') IS NOT NULL AS pushed;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('types_q', ARRAY['{"n": 3}']::jsonb[]);
SELECT payload FROM hopper.jobs WHERE queue = 'types_q' ORDER BY id;
SELECT id FROM hopper.queue_pull('types_q', 5);
SELECT id FROM hopper.queue_take('types_q', 5);
ALTER TABLE hopper.jobs ALTER COLUMN payload TYPE jsonb USING payload::jsonb;
SELECT payload->>'n' AS n, attempt FROM hopper.queue_pull('types_q', 5) ORDER BY id;
DELETE FROM hopper.jobs WHERE queue = 'types_q';

-- The same with json.
ALTER TABLE hopper.jobs ALTER COLUMN payload TYPE json USING payload::json;
SELECT hopper.queue_push('types_q', '{"n": 4}') IS NOT NULL AS pushed;
SELECT payload::text FROM hopper.jobs WHERE queue = 'types_q' ORDER BY id;
SELECT id FROM hopper.queue_pull('types_q', 5);
ALTER TABLE hopper.jobs ALTER COLUMN payload TYPE jsonb USING payload::jsonb;
SELECT payload->>'n' AS n FROM hopper.queue_take('types_q', 5);

-- kind as varchar(10): a longer kind is refused as the INSERT refuses it (22001), one at a time,
-- in a batch, and packed.
ALTER TABLE hopper.jobs ALTER COLUMN kind TYPE varchar(10);
SELECT hopper.queue_push('types_q', '{"n": 5}', kind => 'a-kind-of-twenty-eight-chars');
SELECT hopper.queue_push_batch('types_q', ARRAY['{"n": 6}']::jsonb[],
    kind => 'a-kind-of-twenty-eight-chars');
SELECT hopper.queue_push('types_q', '{"n": 7}', kind => 'short') IS NOT NULL AS pushed;
SELECT kind, length(kind) FROM hopper.jobs WHERE queue = 'types_q';
-- The claims and completions go through the statements, and move the job on as usual.
SELECT payload->>'n' AS n, kind, hopper.queue_complete(id, lease_token) AS completed
FROM hopper.queue_pull('types_q', 5);
SELECT hopper.queue_push('types_q', '{"n": 8}', kind => 'short') IS NOT NULL AS pushed;
SELECT payload->>'n' AS n, kind FROM hopper.queue_take('types_q', 5);
-- A job taken and failed in one transaction goes back with its kind.
SELECT hopper.queue_push('types_q', '{"n": 8.5}', kind => 'back') IS NOT NULL AS pushed;
BEGIN;
SELECT id AS taken_id FROM hopper.queue_take('types_q', 1) \gset
SELECT hopper.queue_fail_taken(:taken_id, 'boom') IS NOT NULL AS failed;
COMMIT;
SELECT payload->>'n' AS n, kind, state, last_error FROM hopper.jobs WHERE queue = 'types_q';
DELETE FROM hopper.jobs WHERE queue = 'types_q';
SELECT payload->>'n' AS n, kind, state FROM hopper.job_history WHERE queue = 'types_q'
ORDER BY id;
ALTER TABLE hopper.jobs ALTER COLUMN kind TYPE text;
ALTER TABLE hopper.job_batches ALTER COLUMN kind TYPE varchar(10);
SET hopper.pack_batches = on;
SELECT hopper.queue_push_batch('types_q', ARRAY['{"n": 9}', '{"n": 10}']::jsonb[],
    kind => 'a-kind-of-twenty-eight-chars');
SELECT count(*) AS pushed FROM hopper.queue_push_batch('types_q',
    ARRAY['{"n": 11}', '{"n": 12}']::jsonb[], kind => 'packed');
SELECT count(*) AS packed_rows FROM hopper.job_batches;
SELECT payload->>'n' AS n, kind FROM hopper.queue_take('types_q', 5) ORDER BY id;
RESET hopper.pack_batches;
ALTER TABLE hopper.job_batches ALTER COLUMN kind TYPE text;

-- run_at as timestamptz(0): the push rounds it to the second, as the INSERT does.
ALTER TABLE hopper.jobs ALTER COLUMN run_at TYPE timestamptz(0);
SELECT date_trunc('second', now()) - interval '1 hour' AS due \gset
SELECT hopper.queue_push('types_q', '{"n": 13}',
    run_at => :'due'::timestamptz + interval '0.4 seconds') IS NOT NULL AS pushed;
SELECT run_at = :'due' AS rounded FROM hopper.jobs WHERE queue = 'types_q';
SELECT payload->>'n' AS n, run_at = :'due' AS rounded FROM hopper.queue_take('types_q', 5);
ALTER TABLE hopper.jobs ALTER COLUMN run_at TYPE timestamptz;

-- History's kind narrower than the job's: a completion does not copy a kind too long for it,
-- and the job stays running under its lease.
DELETE FROM hopper.job_history;
ALTER TABLE hopper.jobs ALTER COLUMN kind TYPE varchar(10);
ALTER TABLE hopper.job_history ALTER COLUMN kind TYPE varchar(3);
SELECT hopper.queue_push('types_q', '{"n": 14}', kind => 'sixsix') IS NOT NULL AS pushed;
CREATE TEMP TABLE leased AS SELECT * FROM hopper.queue_pull('types_q', 1);
SELECT hopper.queue_complete(id, lease_token) FROM leased;
SELECT count(*) AS in_history FROM hopper.job_history;
ALTER TABLE hopper.job_history ALTER COLUMN kind TYPE text;
SELECT hopper.queue_complete(id, lease_token) AS completed FROM leased;
SELECT payload->>'n' AS n, kind FROM hopper.job_history;
ALTER TABLE hopper.jobs ALTER COLUMN kind TYPE text;
\c :regression_db
DROP DATABASE :"own_db" WITH (FORCE);
