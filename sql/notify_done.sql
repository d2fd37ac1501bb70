-- hopper:done is opt-in per queue: queue_set_notify_done(queue, enabled) and its bad inputs.
-- (Which notifications arrive is tested by the isolation spec notify.spec and TAP t/004.)
SET hopper.notify = off;
\i sql/include/try.sql

SELECT hopper.queue_create('nd') AS created;
SELECT notify_done AS default_notify_done FROM hopper.queues WHERE name = 'nd';
-- Returns the previous setting.
SELECT hopper.queue_set_notify_done('nd', true) AS was;
SELECT hopper.queue_set_notify_done('nd', true) AS was;
SELECT notify_done FROM hopper.queues WHERE name = 'nd';
SELECT hopper.queue_set_notify_done('nd', false) AS was;
SELECT notify_done FROM hopper.queues WHERE name = 'nd';

-- Bad inputs change nothing.
SELECT pg_temp.try($$SELECT hopper.queue_set_notify_done(NULL, true)$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_notify_done('nd', NULL)$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_notify_done('has space', true)$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_notify_done('no-such-queue', true)$$);
SELECT count(*) AS created_by_mistake FROM hopper.queues WHERE name = 'no-such-queue';
SELECT notify_done FROM hopper.queues WHERE name = 'nd';

-- Queue administration: neither producers nor workers may change it.
CREATE ROLE regress_hopper_nd_worker;
GRANT hopper_worker TO regress_hopper_nd_worker;
GRANT EXECUTE ON FUNCTION pg_temp.try(text) TO regress_hopper_nd_worker;
SET ROLE regress_hopper_nd_worker;
SELECT pg_temp.try($$SELECT hopper.queue_set_notify_done('nd', true)$$) AS worker_sets;
RESET ROLE;
REVOKE EXECUTE ON FUNCTION pg_temp.try(text) FROM regress_hopper_nd_worker;
DROP ROLE regress_hopper_nd_worker;

-- The completion paths read the setting in the statement that finishes the job; with it on or off
-- they complete, fail, cancel and batch-complete alike.
SELECT hopper.queue_set_notify_done('nd', true) AS was;
SET hopper.notify = on;
SELECT hopper.queue_push('nd', jsonb_build_object('n', i)) > 0 AS pushed FROM generate_series(1, 4) i;
SELECT hopper.queue_complete(id, lease_token) AS completed FROM hopper.queue_pull('nd', 1);
SELECT hopper.queue_fail(id, lease_token, 'no', permanent => true) AS failed FROM hopper.queue_pull('nd', 1);
SELECT count(*) AS batch_completed FROM hopper.queue_pull('nd', 1) j,
    LATERAL hopper.queue_complete_many(ARRAY[j.id], ARRAY[j.lease_token]);
SELECT hopper.queue_cancel(id) AS cancelled FROM hopper.jobs WHERE queue = 'nd';
SELECT state, count(*) FROM hopper.job_history WHERE queue = 'nd' GROUP BY state ORDER BY state;
RESET hopper.notify;

SHOW hopper.notify_relay;
SELECT hopper.queue_drop('nd') AS dropped;
