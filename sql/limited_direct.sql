-- Pulls from a queue with concurrency limits (and no rate limits) choose their jobs straight
-- through the access methods when they have no kinds filter (include/hopper/limited_window.hpp),
-- and through the limited claim statements when they have one. Both ways must claim the same
-- jobs: each comparison below pulls both ways from the same state, each pull rolled back.
SET hopper.notify = off;
SELECT setseed(0.25);

-- The ids one pull claims, in the order it returns them; the pull is rolled back.
CREATE FUNCTION pg_temp.picks(q text, n int, kinds text[]) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
    got bigint[];
BEGIN
    SELECT array_agg(id) INTO got FROM hopper.queue_pull(q, n, kinds => kinds);
    RAISE EXCEPTION 'picked %', coalesce(got::text, '{}');
EXCEPTION WHEN raise_exception THEN
    RETURN substr(SQLERRM, 8)::bigint[];
END $$;
-- Both ways, for pulls of 1, 3, 10 and 40: what each took, and whether they agree.
CREATE FUNCTION pg_temp.compare(q text) RETURNS TABLE (n int, taken int, same boolean)
LANGUAGE sql AS $$
    SELECT n, cardinality(d), d IS NOT DISTINCT FROM s
    FROM unnest(ARRAY[1, 3, 10, 40]) n,
         LATERAL (SELECT pg_temp.picks(q, n, NULL) AS d, pg_temp.picks(q, n, ARRAY['k']) AS s) p
$$;
-- Pushes n jobs of kind k with random keys among `keys` (a quarter without a key), random
-- priorities and a few not yet due.
CREATE FUNCTION pg_temp.fill(q text, n int, keys int) RETURNS bigint LANGUAGE sql AS $$
    SELECT count(hopper.queue_push(q, jsonb_build_object('i', i), kind => 'k',
        priority => (random() * 3)::int::smallint,
        run_at => CASE WHEN random() < 0.1 THEN now() + interval '1 hour' END,
        concurrency_key => CASE WHEN random() < 0.25 THEN NULL
                                ELSE 'key' || (random() * (keys - 1))::int END))
    FROM generate_series(1, n) i
$$;

-- Two running per key by default, with some jobs already running.
SELECT hopper.queue_create('ld') AS created;
SELECT pg_temp.fill('ld', 300, 6) AS pushed;
SELECT hopper.queue_set_concurrency('ld', NULL, 2);
SELECT count(*) AS running FROM hopper.queue_pull('ld', 5);
SELECT * FROM pg_temp.compare('ld');

-- Overrides above and below the default, one of them full already.
SELECT hopper.queue_set_key_limit('ld', 'key1', 5), hopper.queue_set_key_limit('ld', 'key2', 1);
SELECT * FROM pg_temp.compare('ld');

-- A queue-wide cap, then a cap reached: nothing to claim.
SELECT hopper.queue_set_concurrency('ld', 12, 2);
SELECT * FROM pg_temp.compare('ld');
SELECT count(*) AS topped_up FROM hopper.queue_pull('ld', 40);
SELECT * FROM pg_temp.compare('ld');

-- A cap with no limit per key.
SELECT hopper.queue_set_concurrency('ld', 30, NULL);
SELECT hopper.queue_set_key_limit('ld', 'key1', NULL), hopper.queue_set_key_limit('ld', 'key2', NULL);
SELECT * FROM pg_temp.compare('ld');

-- Full keys hold the front of the queue: the window does not settle the pull, and the claim
-- walks the keys instead. 200 jobs of one key come first; its one slot is taken.
SELECT hopper.queue_create('ld-front') AS created;
SELECT count(hopper.queue_push('ld-front', jsonb_build_object('i', i), kind => 'k',
                               concurrency_key => 'noisy', priority => -1::smallint))
FROM generate_series(1, 200) i;
SELECT pg_temp.fill('ld-front', 100, 20) AS pushed;
SELECT hopper.queue_set_concurrency('ld-front', NULL, 1);
SELECT count(*) AS noisy_running FROM hopper.queue_pull('ld-front', 1);
SELECT * FROM pg_temp.compare('ld-front');
-- What a pull of 10 took: none of the noisy key's jobs, and at most one job of any other key.
SELECT count(*) AS taken, count(*) FILTER (WHERE concurrency_key = 'noisy') AS noisy,
       count(concurrency_key) = count(DISTINCT concurrency_key) AS one_per_key
FROM hopper.jobs WHERE id = ANY (pg_temp.picks('ld-front', 10, NULL));
