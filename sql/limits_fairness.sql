-- Fairness: tenant a has 10,000 jobs waiting ahead of tenant b's 10, and a slot limit of 2. b's jobs
-- are all claimed in the first pulls, while a never has more than 2 running.
SET hopper.notify = off;
SELECT hopper.queue_create('fair') AS created;
SELECT count(*) AS a_pushed FROM hopper.queue_push_batch('fair',
    (SELECT array_agg(jsonb_build_object('t', 'a', 'i', i) ORDER BY i) FROM generate_series(1, 10000) i),
    concurrency_keys => array_fill('a'::text, ARRAY[10000]));
SELECT count(*) AS b_pushed FROM hopper.queue_push_batch('fair',
    (SELECT array_agg(jsonb_build_object('t', 'b', 'i', i) ORDER BY i) FROM generate_series(1, 10) i),
    concurrency_keys => array_fill('b'::text, ARRAY[10]));
SELECT hopper.queue_set_key_limit('fair', 'a', 2);
ANALYZE hopper.jobs;

-- Twelve workers pull one job each, in turn, and keep it.
CREATE TEMP TABLE pulls (pull int, tag text, a_running bigint);
DO $$
DECLARE
    tag text;
BEGIN
    FOR p IN 1 .. 13 LOOP
        SELECT (payload->>'t') || (payload->>'i') INTO tag FROM hopper.queue_pull('fair', 1);
        INSERT INTO pulls SELECT p, coalesce(tag, '(none)'), running
        FROM hopper.queue_limits('fair') WHERE concurrency_key = 'a';
    END LOOP;
END $$;
SELECT * FROM pulls ORDER BY pull;

-- A worker pulling many at once gets the same: a is held at 2.
SELECT count(*) AS released FROM hopper.queue_jobs('fair', 'running', 100) j,
    LATERAL (SELECT hopper.queue_cancel(j.id)) c;
SELECT hopper.queue_push('fair', '{"t": "b", "i": 11}', concurrency_key => 'b') > 0 AS pushed;
SELECT payload->>'t' AS t, count(*) FROM hopper.queue_pull('fair', 50) GROUP BY 1 ORDER BY 1;
SELECT scope, concurrency_key, max_running, running FROM hopper.queue_limits('fair');
SELECT hopper.queue_drop('fair');

-- Many tenants with one slot each: a pull takes one job of each tenant in push order, and once
-- every tenant runs one job nothing more is handed out.
SELECT hopper.queue_create('many') AS created;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('many',
    (SELECT array_agg(jsonb_build_object('i', i) ORDER BY i) FROM generate_series(1, 400) i),
    concurrency_keys => (SELECT array_agg('t' || (i % 200) ORDER BY i) FROM generate_series(1, 400) i));
SELECT hopper.queue_set_concurrency('many', NULL, 1);
CREATE FUNCTION pg_temp.pull_many(n int) RETURNS TABLE (jobs bigint, tenants bigint, first int, last int)
LANGUAGE sql AS $$
    SELECT count(*), count(DISTINCT (payload->>'i')::int % 200), min((payload->>'i')::int),
           max((payload->>'i')::int)
    FROM hopper.queue_pull('many', n)
$$;
SELECT * FROM pg_temp.pull_many(50);
SELECT * FROM pg_temp.pull_many(300);
SELECT * FROM pg_temp.pull_many(10);
SELECT scope, max_running, running FROM hopper.queue_limits('many') WHERE scope <> 'key';
SELECT hopper.queue_drop('many');
