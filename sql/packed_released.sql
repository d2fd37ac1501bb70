-- A job released back from a packed row keeps its run_at, so it is claimed again before the jobs of
-- its priority that fell due after it: before the rest of its own row too, with a kinds filter
-- (the packed claim statements) as without one (the access methods), pulled or taken.
-- A database of its own: ids from 1, and the pull without kinds is the direct claim.
\set own_db hopper_packed_released
\i sql/include/new_database.sql
CREATE EXTENSION hopper;
SET hopper.notify = off;
SET hopper.pack_batches = on;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('rel', array_fill('{}'::jsonb, ARRAY[100]),
    kind => 'k');
SELECT count(*) AS packed_rows FROM hopper.job_batches WHERE queue = 'rel';

-- Job 1 is pulled and released: the row's front has moved past it, and it waits as a row.
CREATE TEMP TABLE held AS SELECT * FROM hopper.queue_pull('rel', 1, kinds => ARRAY['k']);
SELECT id AS released FROM held WHERE hopper.queue_release(id, lease_token);
-- The statement that claims with a kinds filter locks one packed row for a pull of 10: job 1
-- comes first, then the row's next jobs.
CREATE TEMP TABLE pulled AS SELECT * FROM hopper.queue_pull('rel', 10, kinds => ARRAY['k']);
SELECT array_agg(id ORDER BY id) AS pulled_with_kinds FROM pulled;

-- The same for queue_take: job 5, released, comes before the row's job 11.
SELECT hopper.queue_release(5, (SELECT lease_token FROM pulled WHERE id = 5)) AS released;
SELECT array_agg(id ORDER BY id) AS taken_with_kinds
FROM hopper.queue_take('rel', 10, kinds => ARRAY['k']);

-- And for the claims without a filter: job 7, released, comes before the row's job 20.
SELECT hopper.queue_release(7, (SELECT lease_token FROM pulled WHERE id = 7)) AS released;
SELECT array_agg(id ORDER BY id) AS pulled_without_kinds FROM hopper.queue_pull('rel', 3);

SELECT count(*) AS waiting FROM hopper.queue_jobs('rel', state => 'available');

\c :regression_db
DROP DATABASE :"own_db" WITH (FORCE);
