-- A transaction whose only writes are queue_pull's claims commits without waiting for its WAL
-- flush (hopper.async_claims); any other write in the transaction keeps it synchronous. The
-- extension says which at DEBUG1 when it decides so.
SET hopper.notify = off;
SELECT count(*) AS pushed
FROM hopper.queue_push_batch('ac', ARRAY(SELECT pg_catalog.jsonb_build_object('n', g)
                                         FROM pg_catalog.generate_series(1, 20) g));
-- The first statements of a fresh database may prune catalog pages (WAL of their own); that
-- only makes a commit synchronous, so warm up before listening.
SELECT count(*) AS warm_up FROM hopper.queue_pull('ac', 1);
SELECT count(*) AS warm_up FROM hopper.queue_complete_pull(NULL, NULL, NULL, 'ac', 1);
SET client_min_messages = debug1;

-- A pull on its own, and two pulls in one transaction: asynchronous.
SELECT count(*) AS claimed FROM hopper.queue_pull('ac', 1);
BEGIN;
SELECT count(*) AS claimed FROM hopper.queue_pull('ac', 1);
SELECT count(*) AS claimed FROM hopper.queue_pull('ac', 2);
COMMIT;
-- queue_complete_pull without a job to complete only pulls.
SELECT count(*) AS claimed FROM hopper.queue_complete_pull(NULL, NULL, NULL, 'ac', 1);

-- Anything else written in the transaction, before or after the pull: synchronous.
BEGIN;
SELECT hopper.queue_push('ac', '{}') > 0 AS pushed;
SELECT count(*) AS claimed FROM hopper.queue_pull('ac', 1);
COMMIT;
CREATE TABLE own_rows (x integer);
BEGIN;
SELECT count(*) AS claimed FROM hopper.queue_pull('ac', 1);
INSERT INTO own_rows VALUES (1);
COMMIT;
BEGIN;
INSERT INTO own_rows VALUES (2);
SELECT count(*) AS claimed FROM hopper.queue_pull('ac', 1);
COMMIT;
-- A completion is a write the caller relies on: completing and pulling stays synchronous.
SELECT count(*) AS claimed
FROM hopper.queue_complete_pull(
    (SELECT id FROM hopper.jobs WHERE queue = 'ac' AND state = 'running' ORDER BY id LIMIT 1),
    (SELECT lease_token FROM hopper.jobs WHERE queue = 'ac' AND state = 'running' ORDER BY id LIMIT 1),
    NULL, 'ac', 1);
BEGIN;
SELECT count(*) AS completed
FROM hopper.queue_complete_many(
    ARRAY(SELECT id FROM hopper.jobs WHERE queue = 'ac' AND state = 'running' ORDER BY id LIMIT 2),
    ARRAY(SELECT lease_token FROM hopper.jobs WHERE queue = 'ac' AND state = 'running' ORDER BY id LIMIT 2));
SELECT count(*) AS claimed FROM hopper.queue_pull('ac', 1);
COMMIT;

-- A pull that claimed nothing wrote nothing: there is no commit to hurry.
SELECT count(*) AS claimed FROM hopper.queue_pull('no_jobs_here', 1);
-- Rolled back: nothing to commit.
BEGIN;
SELECT count(*) AS claimed FROM hopper.queue_pull('ac', 1);
ROLLBACK;
-- A pull that buries a job whose last attempt's lease ran out writes its history row and tells
-- hopper:done: no claim, so synchronous (a crash after an asynchronous commit undid the burial
-- its listeners had been told of). The transaction holds the lease it let run out, so that no
-- reaper rescues the job first.
RESET client_min_messages;
SELECT hopper.queue_create('ac_bury', max_attempts => 1) AS created;
-- The first burial of a session writes WAL of its own (pruned catalog pages): warm up.
SELECT hopper.queue_push('ac_bury', '{}') > 0 AS pushed;
BEGIN;
SELECT count(*) AS claimed FROM hopper.queue_pull('ac_bury', 1, lease => '1 millisecond');
SELECT pg_catalog.pg_sleep(0.01);
SELECT count(*) AS claimed FROM hopper.queue_pull('ac_bury', 1);
COMMIT;
SELECT hopper.queue_push('ac_bury', '{}') > 0 AS pushed;
SET client_min_messages = debug1;
BEGIN;
SELECT count(*) AS claimed FROM hopper.queue_pull('ac_bury', 1, lease => '1 millisecond');
SELECT pg_catalog.pg_sleep(0.01);
SELECT count(*) AS claimed FROM hopper.queue_pull('ac_bury', 1);
COMMIT;
RESET client_min_messages;
SELECT state, count(*) FROM hopper.queue_jobs('ac_bury') GROUP BY state;
SET client_min_messages = debug1;
-- Turned off, or already asynchronous: nothing to do.
SET hopper.async_claims = off;
SELECT count(*) AS claimed FROM hopper.queue_pull('ac', 1);
RESET hopper.async_claims;
SET synchronous_commit = off;
SELECT count(*) AS claimed FROM hopper.queue_pull('ac', 1);
RESET synchronous_commit;
-- And on again for the next pull.
SELECT count(*) AS claimed FROM hopper.queue_pull('ac', 1);
RESET client_min_messages;

-- The claims themselves are ordinary: each job claimed once, with distinct tokens.
SELECT count(*) AS running, count(DISTINCT lease_token) AS tokens
FROM hopper.jobs WHERE queue = 'ac' AND state = 'running';
DROP TABLE own_rows;
