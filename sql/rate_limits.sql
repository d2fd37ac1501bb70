-- Rate limits: token buckets for a queue and for one key, refilled by the pull's clock (`at`), so
-- time travel makes them deterministic.
SET hopper.notify = off;
\i sql/include/try.sql
CREATE FUNCTION pg_temp.pull(q text, n int, at timestamptz) RETURNS text LANGUAGE sql AS $$
    SELECT coalesce(string_agg(payload->>'i', ' ' ORDER BY id), '(none)')
    FROM hopper.queue_pull(q, n, at => at)
$$;
CREATE FUNCTION pg_temp.tokens(q text) RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(coalesce(concurrency_key, scope) || ':' || max_claims || '/' || per, ' '
                      ORDER BY concurrency_key NULLS FIRST)
    FROM hopper.queue_limits(q) WHERE max_claims IS NOT NULL
$$;

SELECT hopper.queue_create('rated') AS created;
SELECT count(*) FROM hopper.queue_push_batch('rated',
    (SELECT array_agg(jsonb_build_object('i', i) ORDER BY i) FROM generate_series(1, 20) i));
-- Three claims per 10 seconds for the whole queue. The clock is t0 = an hour ahead, later than the
-- bucket's creation, so the bucket is full at t0.
SELECT hopper.queue_set_rate_limit('rated', 3, '10 seconds');
SELECT pg_temp.tokens('rated');
-- A queue with rate limits is marked so: its claims keep the queue's lock to commit.
SELECT limited, rated FROM hopper.queues WHERE name = 'rated';
SELECT now() + interval '1 hour' AS t0 \gset
SELECT pg_temp.pull('rated', 10, :'t0') AS burst_of_3;
SELECT pg_temp.pull('rated', 10, :'t0') AS empty_bucket;
-- One token comes back every 3.33 s.
SELECT pg_temp.pull('rated', 10, :'t0'::timestamptz + interval '3 seconds') AS after_3s;
SELECT pg_temp.pull('rated', 10, :'t0'::timestamptz + interval '4 seconds') AS after_4s;
SELECT pg_temp.pull('rated', 10, :'t0'::timestamptz + interval '7 seconds') AS after_7s;
-- A long pause refills the bucket only up to its size: no burst beyond max_claims.
SELECT pg_temp.pull('rated', 10, :'t0'::timestamptz + interval '1 hour') AS after_1h;
-- A pull from the past neither refills nor drains.
SELECT pg_temp.pull('rated', 10, :'t0') AS back_in_time;
SELECT floor(tokens) AS tokens_left FROM hopper.queue_limits('rated') WHERE scope = 'queue';
-- Removing the limit frees the queue at once.
SELECT hopper.queue_set_rate_limit('rated', NULL, NULL);
SELECT pg_temp.pull('rated', 3, :'t0'::timestamptz + interval '1 hour') AS unlimited;
SELECT limited, rated FROM hopper.queues WHERE name = 'rated';
SELECT hopper.queue_drop('rated');

-- Per key: tenant a at most 2 per minute, b unlimited; the queue's bucket counts both.
SELECT hopper.queue_create('keyrate', lease => '1 hour') AS created;
SELECT count(*) FROM hopper.queue_push_batch('keyrate',
    (SELECT array_agg(jsonb_build_object('i', 'a' || i) ORDER BY i) FROM generate_series(1, 5) i),
    concurrency_keys => array_fill('a'::text, ARRAY[5]));
SELECT count(*) FROM hopper.queue_push_batch('keyrate',
    (SELECT array_agg(jsonb_build_object('i', 'b' || i) ORDER BY i) FROM generate_series(1, 5) i),
    concurrency_keys => array_fill('b'::text, ARRAY[5]));
SELECT hopper.queue_set_rate_limit('keyrate', 2, '1 minute', concurrency_key => 'a');
SELECT hopper.queue_set_rate_limit('keyrate', 6, '1 minute');
SELECT pg_temp.tokens('keyrate');
SELECT pg_temp.pull('keyrate', 10, :'t0') AS a_two_b_four;
SELECT pg_temp.pull('keyrate', 10, :'t0'::timestamptz + interval '30 seconds') AS half_a_minute;
SELECT scope, concurrency_key, floor(tokens) AS tokens FROM hopper.queue_limits('keyrate')
WHERE max_claims IS NOT NULL ORDER BY concurrency_key NULLS FIRST;
-- Rate and slots together: the stricter one binds. a and b run more than one job each already.
SELECT hopper.queue_set_rate_limit('keyrate', NULL, NULL);
SELECT hopper.queue_set_concurrency('keyrate', NULL, 1);
SELECT hopper.queue_push('keyrate', '{"i": "c1"}', concurrency_key => 'c') > 0 AS pushed;
SELECT pg_temp.pull('keyrate', 10, :'t0'::timestamptz + interval '2 minutes') AS slots_bind;
-- Changing a bucket fills it again.
SELECT hopper.queue_set_rate_limit('keyrate', 5, '1 minute', concurrency_key => 'a');
SELECT floor(tokens) AS refilled FROM hopper.queue_limits('keyrate') WHERE concurrency_key = 'a';
SELECT hopper.queue_drop('keyrate');
SELECT count(*) AS leftovers FROM hopper.rate_limits;

-- Every tenant at most 2 per minute (each_key), unless it has a rate of its own.
SELECT hopper.queue_create('tenants', lease => '1 hour') AS created;
SELECT count(*) FROM hopper.queue_push_batch('tenants',
    (SELECT array_agg(jsonb_build_object('i', 'a' || i) ORDER BY i) FROM generate_series(1, 6) i),
    concurrency_keys => array_fill('a'::text, ARRAY[6]));
SELECT count(*) FROM hopper.queue_push_batch('tenants',
    (SELECT array_agg(jsonb_build_object('i', 'b' || i) ORDER BY i) FROM generate_series(1, 3) i),
    concurrency_keys => array_fill('b'::text, ARRAY[3]));
SELECT hopper.queue_push('tenants', '{"i": "u1"}') > 0 AS unkeyed_pushed;
SELECT hopper.queue_set_rate_limit('tenants', 2, '1 minute', each_key => true);
SELECT pg_temp.pull('tenants', 10, :'t0') AS two_each;
SELECT scope, concurrency_key, max_claims, per, floor(tokens) AS tokens FROM hopper.queue_limits('tenants')
WHERE max_claims IS NOT NULL ORDER BY scope, concurrency_key;
-- a's own rate replaces the default, with a full bucket; b still has the default's.
SELECT hopper.queue_set_rate_limit('tenants', 5, '1 minute', concurrency_key => 'a');
SELECT pg_temp.pull('tenants', 10, :'t0') AS a_own_rate;
SELECT pg_temp.pull('tenants', 10, :'t0'::timestamptz + interval '30 seconds') AS b_refilled_one;
-- b gets a rate of its own; removing a's and then the default leaves only b's.
SELECT hopper.queue_set_rate_limit('tenants', 3, '1 minute', concurrency_key => 'b');
SELECT hopper.queue_set_rate_limit('tenants', NULL, NULL, concurrency_key => 'a');
SELECT hopper.queue_set_rate_limit('tenants', NULL, NULL, each_key => true);
SELECT scope, concurrency_key, max_claims, per FROM hopper.queue_limits('tenants')
WHERE max_claims IS NOT NULL ORDER BY scope, concurrency_key;
SELECT limited, rated FROM hopper.queues WHERE name = 'tenants';
-- A concurrency limit alone is no rate limit.
SELECT hopper.queue_set_rate_limit('tenants', NULL, NULL, concurrency_key => 'b');
SELECT hopper.queue_set_concurrency('tenants', NULL, 3);
SELECT limited, rated FROM hopper.queues WHERE name = 'tenants';
SELECT pg_temp.try($$SELECT hopper.queue_set_rate_limit('tenants', 1, '1 second', concurrency_key => 'a', each_key => true)$$);
SELECT hopper.queue_drop('tenants');

-- A key under the default rate with no bucket (none yet, or dropped when the default was set
-- again) shows the default with a full bucket, as its claims will find it.
SELECT hopper.queue_create('tenants2', lease => '1 hour') AS created;
SELECT count(*) FROM hopper.queue_push_batch('tenants2', ARRAY['{"i": "a1"}', '{"i": "a2"}']::jsonb[],
    concurrency_keys => ARRAY['a', 'a']);
SELECT hopper.queue_set_rate_limit('tenants2', 2, '1 minute', each_key => true);
SELECT pg_temp.pull('tenants2', 10, :'t0') AS a_took_its_two;
SELECT hopper.queue_set_rate_limit('tenants2', 2, '1 minute', each_key => true);
SELECT scope, concurrency_key, running, max_claims, per, floor(tokens) AS tokens
FROM hopper.queue_limits('tenants2') ORDER BY scope, concurrency_key;
SELECT hopper.queue_drop('tenants2');

-- Bad input: a real SQLSTATE, nothing changed.
SELECT hopper.queue_create('rate_bad') AS created;
SELECT pg_temp.try($$SELECT hopper.queue_set_rate_limit(NULL, 1, '1 second')$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_rate_limit('no-such-queue', 1, '1 second')$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_rate_limit('rate_bad', 0, '1 second')$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_rate_limit('rate_bad', 1000001, '1 second')$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_rate_limit('rate_bad', 1, NULL)$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_rate_limit('rate_bad', 1, '0 seconds')$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_rate_limit('rate_bad', 1, '-1 second')$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_rate_limit('rate_bad', 1, '32 days')$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_rate_limit('rate_bad', 1, '1 second', concurrency_key => '')$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_rate_limit('rate_bad', 1, '1 second', concurrency_key => repeat('k', 513))$$);
SELECT * FROM hopper.queue_limits('rate_bad');
SELECT hopper.queue_drop('rate_bad');

-- Roles: a hopper_worker pulls from a limited queue (reading the limits, spending tokens);
-- producers and workers read queue_limits; changing limits stays with the owner.
CREATE ROLE regress_limits_worker;
GRANT hopper_worker TO regress_limits_worker;
CREATE ROLE regress_limits_app;
GRANT hopper_producer TO regress_limits_app;
GRANT EXECUTE ON FUNCTION pg_temp.try(text) TO PUBLIC;
SELECT hopper.queue_create('rate_roles') AS created;
SELECT hopper.queue_push('rate_roles', '{"i": "k1"}', concurrency_key => 'k') > 0 AS pushed;
SELECT hopper.queue_set_key_limit('rate_roles', 'k', 1);
SELECT hopper.queue_set_rate_limit('rate_roles', 5, '1 minute', concurrency_key => 'k');
SET ROLE regress_limits_worker;
SELECT payload->>'i' AS worker_pulled FROM hopper.queue_pull('rate_roles', 5);
SELECT scope, concurrency_key, running, floor(tokens) AS tokens FROM hopper.queue_limits('rate_roles')
WHERE scope = 'key';
SELECT pg_temp.try($$SELECT hopper.queue_set_key_limit('rate_roles', 'k', 5)$$) AS worker_sets_limit;
SET ROLE regress_limits_app;
SELECT count(*) AS app_reads_limits FROM hopper.queue_limits('rate_roles');
SELECT pg_temp.try($$SELECT hopper.queue_set_rate_limit('rate_roles', 1, '1 second')$$) AS app_sets_rate;
SELECT pg_temp.try($$SELECT hopper.queue_set_concurrency('rate_roles', 1, 1)$$) AS app_sets_concurrency;
RESET ROLE;
SELECT hopper.queue_drop('rate_roles');

-- A worker's `at` does not move the buckets' clock (as with leases, only a superuser's does): a
-- pull dated a year ahead takes only the tokens there are now, and leaves the refills of every
-- other pull as they were. Two claims an hour; the worker takes both.
SELECT hopper.queue_create('rate_clock') AS created;
SELECT count(*) FROM hopper.queue_push_batch('rate_clock',
    (SELECT array_agg(jsonb_build_object('i', i) ORDER BY i) FROM generate_series(1, 6) i));
SELECT hopper.queue_set_rate_limit('rate_clock', 2, '1 hour');
SET ROLE regress_limits_worker;
SELECT string_agg(payload->>'i', ' ' ORDER BY id) AS worker_now
FROM hopper.queue_pull('rate_clock', 5);
SELECT coalesce(string_agg(payload->>'i', ' ' ORDER BY id), '(none)') AS worker_a_year_ahead
FROM hopper.queue_pull('rate_clock', 5, at => now() + interval '1 year');
RESET ROLE;
SELECT refilled_at <= now() AS clock_not_ahead FROM hopper.rate_limits WHERE queue = 'rate_clock';
-- An hour on, the bucket is full again for everybody.
SELECT pg_temp.pull('rate_clock', 5, now() + interval '1 hour') AS an_hour_on;
SELECT hopper.queue_drop('rate_clock');
DROP ROLE regress_limits_worker, regress_limits_app;
