-- The direct writes (push, batches, leases) open only the indexes of hopper.jobs that the row they
-- write goes into, judged by each index's predicate. An index an operator adds must still get
-- every row its predicate admits, whenever it was created, and its constraint must still hold:
-- for pushes, and for the new version a lease writes.
SET hopper.notify = off;
\i sql/include/try.sql
SELECT hopper.queue_create('di') AS created;

-- Pushes made before the index exists: this backend has described hopper.jobs' indexes already.
SELECT hopper.queue_push('di', '{"n": 0}') IS NOT NULL AS pushed;

-- A partial index for running jobs, another for jobs of priority 7: the first gets an entry when a
-- lease makes a job running, the second when a push of priority 7 comes in; neither gets others.
CREATE INDEX regress_di_running ON hopper.jobs (worker, id) WHERE state = 'running';
CREATE INDEX regress_di_urgent ON hopper.jobs (queue, id) WHERE priority = 7;
SELECT hopper.queue_push('di', '{"n": 1}', priority => 7) IS NOT NULL AS pushed;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('di', ARRAY['{"n": 2}', '{"n": 3}']::jsonb[],
                                                      priority => 7);
SELECT hopper.queue_push('di', '{"n": 4}') IS NOT NULL AS pushed;
CREATE TEMP TABLE leased AS SELECT * FROM hopper.queue_pull('di', 2, worker => 'w1');
SELECT payload->>'n' AS n FROM leased ORDER BY id;

-- Read through the indexes alone: what each holds is what its predicate admits.
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM hopper.jobs WHERE state = 'running' AND worker = 'w1';
SELECT j.payload->>'n' AS n FROM hopper.jobs j
WHERE j.state = 'running' AND j.worker = 'w1' AND j.queue = 'di' ORDER BY j.id;
EXPLAIN (COSTS OFF) SELECT id FROM hopper.jobs WHERE queue = 'di' AND priority = 7;
SELECT j.payload->>'n' AS n, j.state FROM hopper.jobs j
WHERE j.queue = 'di' AND j.priority = 7 ORDER BY j.id;
RESET enable_seqscan;
RESET enable_bitmapscan;
SELECT count(hopper.queue_complete(id, lease_token)) AS completed FROM leased;
DROP TABLE leased;
DROP INDEX hopper.regress_di_running;
DROP INDEX hopper.regress_di_urgent;
SELECT count(*) AS taken FROM hopper.queue_take('di', 10);

-- A unique partial index that only this queue's running jobs enter: one at a time. A push is not
-- stopped by it; a lease of two at once, or a second lease while one runs, is refused with the
-- index's unique violation, and nothing is claimed.
CREATE UNIQUE INDEX regress_di_one_running ON hopper.jobs (queue)
    WHERE state = 'running' AND queue = 'di';
SELECT count(*) AS pushed FROM hopper.queue_push_batch('di', ARRAY['{"n": 5}', '{"n": 6}']::jsonb[]);
SELECT pg_temp.try($$SELECT hopper.queue_pull('di', 2)$$) AS lease_two;
SELECT count(*) AS running FROM hopper.jobs WHERE queue = 'di' AND state = 'running';
SELECT payload->>'n' AS n FROM hopper.queue_pull('di', 1);
SELECT pg_temp.try($$SELECT hopper.queue_pull('di', 1)$$) AS second_lease;
SELECT count(*) AS running FROM hopper.jobs WHERE queue = 'di' AND state = 'running';
DROP INDEX hopper.regress_di_one_running;
-- Dropped, it no longer holds: the second job is leased.
SELECT payload->>'n' AS n FROM hopper.queue_pull('di', 1);

-- A CHECK constraint whose function pushes another job, after an ANALYZE that invalidates what
-- the outer push holds about hopper.jobs' indexes, in the middle of that push: both jobs land, and
-- each is in the pull index.
CREATE FUNCTION regress_di_side(p jsonb) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    IF p ? 'outer' THEN
        ANALYZE hopper.jobs;
        PERFORM hopper.queue_push('di', '{"inner": true}');
    END IF;
    RETURN true;
END $$;
ALTER TABLE hopper.jobs ADD CONSTRAINT regress_di_side CHECK (regress_di_side(payload));
SELECT hopper.queue_push('di', '{"outer": true}') IS NOT NULL AS pushed;
ALTER TABLE hopper.jobs DROP CONSTRAINT regress_di_side;
DROP FUNCTION regress_di_side(jsonb);
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT payload FROM hopper.jobs WHERE queue = 'di' AND state = 'available'
ORDER BY priority, run_at, id;
RESET enable_seqscan;
RESET enable_bitmapscan;
SELECT count(*) AS taken FROM hopper.queue_take('di', 10);

SELECT hopper.queue_drop('di') AS dropped;
