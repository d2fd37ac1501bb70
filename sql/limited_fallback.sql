-- A pull from a queue with concurrency limits chooses its jobs through the access methods only
-- where it reads what the limit statements would read. Two things an operator may do send it
-- back to the statements, and the limits must still hold: row level security on
-- hopper.queue_key_limits, and a jobs_lease_idx built another way. Each change is rolled back.
SET hopper.notify = off;

CREATE ROLE regress_limited_worker;
GRANT hopper_worker TO regress_limited_worker;
SELECT hopper.queue_create('lf') AS created;
-- One running job per key by default; key 'vip' may run three.
SELECT hopper.queue_set_concurrency('lf', NULL, 1);
SELECT hopper.queue_set_key_limit('lf', 'vip', 3);
SELECT count(hopper.queue_push('lf', jsonb_build_object('i', i), concurrency_key => 'vip'))
    AS pushed
FROM generate_series(1, 5) i;

-- How many of the five vip jobs one pull of 5 leases; the pull is rolled back.
CREATE FUNCTION pg_temp.leased() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    got bigint;
BEGIN
    SELECT count(*) INTO got FROM hopper.queue_pull('lf', 5);
    RAISE EXCEPTION 'leased %', got;
EXCEPTION WHEN raise_exception THEN
    RETURN substr(SQLERRM, 8)::bigint;
END $$;
GRANT EXECUTE ON FUNCTION pg_temp.leased() TO regress_limited_worker;

SELECT pg_temp.leased() AS as_superuser;
SET ROLE regress_limited_worker;
SELECT pg_temp.leased() AS as_worker;
RESET ROLE;

-- Row level security that hides the vip override from the worker: the worker's pull must not
-- see it either, so vip gets the default of one. A superuser is not subject to the policy and
-- still gets three.
BEGIN;
ALTER TABLE hopper.queue_key_limits ENABLE ROW LEVEL SECURITY;
CREATE POLICY hide_vip ON hopper.queue_key_limits FOR SELECT USING (concurrency_key <> 'vip');
SELECT pg_temp.leased() AS as_superuser;
SET ROLE regress_limited_worker;
SELECT pg_temp.leased() AS as_worker_under_policy;
SELECT count(*) AS key_limits_seen FROM hopper.queue_key_limits WHERE queue = 'lf';
RESET ROLE;
ROLLBACK;

-- A jobs_lease_idx that holds no entry for running jobs (an operator's index under the same
-- name): read as the lease index, it would show no job running. Two vip jobs run, so one more
-- may start, and the pull must not count the index's silence as three free slots.
SELECT count(*) AS running FROM hopper.queue_pull('lf', 2);
SELECT pg_temp.leased() AS with_two_running;
BEGIN;
DROP INDEX hopper.jobs_lease_idx;
CREATE INDEX jobs_lease_idx ON hopper.jobs (queue, lease_until)
    WHERE lease_until > '3000-01-01';
SELECT pg_temp.leased() AS other_lease_index;
ROLLBACK;
SELECT pg_temp.leased() AS index_restored;

SELECT hopper.queue_drop('lf') AS dropped;
DROP FUNCTION pg_temp.leased();
DROP ROLE regress_limited_worker;
