-- Durations are fixed lengths: a lease, an extension or a retry delay of '1 day' is 24 hours
-- whatever the session's TimeZone, also across a DST change (a day as 24 hours, a month as 30
-- days, as the arguments are checked). Added on the calendar of a zone that moves its clocks
-- within the day, '1 day' lasted 23 hours (25 at the change back), past the day a lease may last.
-- Every way a lease is made: the direct claim (no kinds filter, a database of its own), the claim
-- statement (a kinds filter), packed rows both ways, a limited queue both ways, a rate-limited
-- queue, queue_complete_pull; the queue's own lease; heartbeats; queue_fail and queue_fail_taken.
\set own_db hopper_fixed_durations
\i sql/include/new_database.sql
SET client_min_messages = warning;
CREATE EXTENSION hopper;
RESET client_min_messages;
SET hopper.notify = off;

-- A zone whose clocks go forward an hour 12 hours from now, wherever the test runs: a POSIX rule
-- (std UTC+0, summer time UTC+1) with the change on that day of the year, at that time.
SELECT format('XST0XDT,%s/%s,%s/12:00:00', extract(doy FROM t)::int - 1, to_char(t, 'HH24:MI:SS'),
              (extract(doy FROM t)::int - 1 + 150) % 365) AS zone
FROM (SELECT (now() + interval '12 hours') AT TIME ZONE 'UTC' AS t) s \gset
SET TimeZone = :'zone';
-- The premise: on this zone's calendar the next day is 23 hours long.
SELECT (now() + interval '1 day') - now() AS calendar_day;

-- Hours from the transaction's start, the clock of a failure; a pull's lease and a heartbeat run
-- from the real time a moment later, hence the rounding.
CREATE FUNCTION pg_temp.hours(t timestamptz) RETURNS numeric LANGUAGE sql AS $$
    SELECT round(extract(epoch FROM t - now()) / 3600, 3)
$$;

SELECT hopper.queue_create('fd_plain'), hopper.queue_create('fd_packed'),
       hopper.queue_create('fd_limited'), hopper.queue_create('fd_rated'),
       hopper.queue_create('fd_own', lease => '1 day');
SELECT hopper.queue_set_concurrency('fd_limited', 100, NULL);
SELECT hopper.queue_set_rate_limit('fd_rated', 100, '1 day');
SELECT count(hopper.queue_push(q, '{}', kind => 'k'))
FROM unnest(ARRAY['fd_plain', 'fd_limited', 'fd_rated', 'fd_own']) q, generate_series(1, 6);
SET hopper.pack_batches = on;
SELECT count(*) FROM hopper.queue_push_batch('fd_packed', array_fill('{}'::jsonb, ARRAY[4]), kind => 'k');
RESET hopper.pack_batches;

SELECT pg_temp.hours(lease_until) AS plain_direct
FROM hopper.queue_pull('fd_plain', 1, lease => '1 day');
SELECT pg_temp.hours(lease_until) AS plain_statement
FROM hopper.queue_pull('fd_plain', 1, lease => '1 day', kinds => ARRAY['k']);
SELECT pg_temp.hours(lease_until) AS packed_direct
FROM hopper.queue_pull('fd_packed', 1, lease => '1 day');
SELECT pg_temp.hours(lease_until) AS packed_statement
FROM hopper.queue_pull('fd_packed', 1, lease => '1 day', kinds => ARRAY['k']);
SELECT pg_temp.hours(lease_until) AS limited_direct
FROM hopper.queue_pull('fd_limited', 1, lease => '1 day');
SELECT pg_temp.hours(lease_until) AS limited_statement
FROM hopper.queue_pull('fd_limited', 1, lease => '1 day', kinds => ARRAY['k']);
SELECT pg_temp.hours(lease_until) AS rated
FROM hopper.queue_pull('fd_rated', 1, lease => '1 day');
SELECT pg_temp.hours(lease_until) AS complete_pull
FROM hopper.queue_complete_pull(NULL, NULL, NULL, 'fd_plain', 1, lease => '1 day');
-- The queue's lease of '1 day', read by the direct claim and by the statement.
SELECT pg_temp.hours(lease_until) AS queue_lease_direct FROM hopper.queue_pull('fd_own', 1);
SELECT pg_temp.hours(lease_until) AS queue_lease_statement
FROM hopper.queue_pull('fd_own', 1, kinds => ARRAY['k']);

-- Heartbeats: extend => '1 day', and the queue's lease of '1 day'.
SELECT id AS hb_id, lease_token AS hb_token
FROM hopper.queue_pull('fd_plain', 1, lease => '1 minute') \gset
BEGIN;
SELECT hopper.queue_heartbeat(:hb_id, :hb_token, extend => '1 day') AS extended;
SELECT pg_temp.hours(lease_until) AS heartbeat_extend FROM hopper.jobs WHERE id = :hb_id;
COMMIT;
SELECT id AS own_id, lease_token AS own_token
FROM hopper.queue_pull('fd_own', 1, lease => '1 minute') \gset
BEGIN;
SELECT hopper.queue_heartbeat(:own_id, :own_token) AS extended;
SELECT pg_temp.hours(lease_until) AS heartbeat_queue_lease FROM hopper.jobs WHERE id = :own_id;
COMMIT;

-- Retry delays: queue_fail and queue_fail_taken with retry_in => '2 days'.
BEGIN;
SELECT hopper.queue_fail(:hb_id, :hb_token, 'boom', retry_in => '2 days') AS failed;
SELECT pg_temp.hours(run_at) AS fail_retry_in FROM hopper.jobs WHERE id = :hb_id;
COMMIT;
BEGIN;
SAVEPOINT work;
SELECT id AS taken_id FROM hopper.queue_take('fd_own', 1) \gset
ROLLBACK TO work;
SELECT hopper.queue_fail_taken(:taken_id, 'boom', retry_in => '2 days') AS failed;
SELECT pg_temp.hours(run_at) AS fail_taken_retry_in FROM hopper.jobs WHERE id = :taken_id;
COMMIT;

-- The settings are stored as the lengths they are used as.
SELECT hopper.queue_create('fd_own', backoff_base => '1 day', backoff_cap => '1 mon',
                           retention => '7 days');
SELECT hopper.queue_set_rate_limit('fd_rated', 5, '1 day', each_key => true);
SELECT lease, backoff_base, backoff_cap, retention FROM hopper.queues WHERE name = 'fd_own';
SELECT key_claims_per FROM hopper.queues WHERE name = 'fd_rated';
SELECT concurrency_key, period FROM hopper.rate_limits WHERE queue = 'fd_rated';
SELECT retention AS default_retention FROM hopper.queues WHERE name = 'fd_plain';
-- A row written by hand may not hold days or months: the claims would add them on the calendar.
\set VERBOSITY terse
INSERT INTO hopper.queues (name, lease) VALUES ('fd_by_hand', '1 day');
INSERT INTO hopper.queues (name, retention) VALUES ('fd_by_hand', '1 mon');
UPDATE hopper.queues SET key_claims_per = '1 day' WHERE name = 'fd_rated';
\set VERBOSITY default

\c :regression_db
DROP DATABASE :"own_db" WITH (FORCE);
