-- Bad input: every one gets an ERROR with a real SQLSTATE and a message naming the argument, and a
-- failed call changes nothing.
SET hopper.notify = off;
\i sql/include/try.sql

SELECT hopper.queue_create('errs') AS created;
SELECT hopper.queue_push('errs', '{"n": 1}') AS id \gset
SELECT id AS pulled, lease_token AS token FROM hopper.queue_pull('errs') \gset

-- Queue names
SELECT pg_temp.try($$SELECT hopper.queue_push(NULL, '{}')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('', '{}')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('has space', '{}')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('-leading-dash', '{}')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('robert''); DROP TABLE hopper.jobs;--', '{}')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push(repeat('q', 49), '{}')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push(repeat('q', 48), '{}') > 0$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('ok.name:with-all_chars9', '{}') > 0$$);
-- "done" would share its channel, hopper:done, with the finished jobs' notifications.
SELECT pg_temp.try($$SELECT hopper.queue_push('done', '{}')$$);
SELECT pg_temp.try($$SELECT hopper.queue_create('done')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('Done', '{}') > 0$$);
-- A long bad name is quoted shortened, without cutting a character in half.
SELECT pg_temp.try($$SELECT hopper.queue_push('a' || repeat('é', 60), '{}')$$);

-- Payloads: objects only, and bounded
SELECT pg_temp.try($$SELECT hopper.queue_push('errs', NULL)$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('errs', '[1, 2]')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('errs', '42')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('errs', '"text"')$$);
SET hopper.max_payload_bytes = 1024;
SELECT pg_temp.try($$SELECT hopper.queue_push('errs', jsonb_build_object('blob', repeat('x', 2000)))$$);
RESET hopper.max_payload_bytes;

-- run_at, priority, kind, max_attempts, keys
SELECT pg_temp.try($$SELECT hopper.queue_push('errs', '{}', run_at => 'infinity')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('errs', '{}', run_at => now() + interval '11 years')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('errs', '{}', run_at => now() - interval '2 years')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('errs', '{}', priority => 32768)$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('errs', '{}', priority => -32769)$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('errs', '{}', kind => '')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('errs', '{}', kind => repeat('k', 129))$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('errs', '{}', max_attempts => 0)$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('errs', '{}', max_attempts => 1001)$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('errs', '{}', dedup_key => '')$$);
SELECT pg_temp.try($$SELECT hopper.queue_push('errs', '{}', concurrency_key => repeat('c', 513))$$);

-- Batch push
SELECT pg_temp.try($$SELECT hopper.queue_push_batch('errs', NULL)$$);
SELECT pg_temp.try($$SELECT hopper.queue_push_batch('errs', ARRAY['{}', NULL]::jsonb[])$$);
SELECT pg_temp.try($$SELECT hopper.queue_push_batch('errs', ARRAY['{}', '[]']::jsonb[])$$);
SELECT pg_temp.try($$SELECT hopper.queue_push_batch('errs', ARRAY['{}', '{}']::jsonb[], dedup_keys => ARRAY['a'])$$);
SELECT pg_temp.try($$SELECT hopper.queue_push_batch('errs', ARRAY['{}']::jsonb[], dedup_keys => ARRAY[''])$$);
SELECT pg_temp.try($$SELECT hopper.queue_push_batch('errs', ARRAY[['{}'], ['{}']]::jsonb[])$$);
SELECT pg_temp.try($$SELECT hopper.queue_push_batch('errs', ARRAY['{}', '{}']::jsonb[],
                                                 dedup_keys => ARRAY[['a'], ['b']])$$);

-- Pull
SELECT pg_temp.try($$SELECT hopper.queue_pull('errs', 0)$$);
SELECT pg_temp.try($$SELECT hopper.queue_pull('errs', -5)$$);
SELECT pg_temp.try($$SELECT hopper.queue_pull('errs', NULL)$$);
SELECT pg_temp.try($$SELECT hopper.queue_pull('errs', 1001)$$);
SET hopper.max_pull = 10;
SELECT pg_temp.try($$SELECT hopper.queue_pull('errs', 11)$$);
RESET hopper.max_pull;
SELECT pg_temp.try($$SELECT hopper.queue_pull('errs', 1, lease => '0 seconds')$$);
SELECT pg_temp.try($$SELECT hopper.queue_pull('errs', 1, lease => '-5 seconds')$$);
SELECT pg_temp.try($$SELECT hopper.queue_pull('errs', 1, lease => '2 days')$$);
-- An interval whose parts differ in sign is refused: 30 days a month made this one 12 hours, but
-- added to a timestamp it lands in the past after a 31-day month.
SELECT pg_temp.try($$SELECT hopper.queue_pull('errs', 1, lease => '-1 mon 30 days 12 hours')$$);
SELECT pg_temp.try($$SELECT hopper.queue_pull('errs', 1, lease => '1 day -1 hour')$$);
SELECT pg_temp.try($$SELECT hopper.queue_set_rate_limit('errs', 10, '-12 mon 365 days 6 hours')$$);
SELECT pg_temp.try($$SELECT hopper.queue_create('errs', retention => '-12 mon 400 days')$$);
SELECT pg_temp.try($$SELECT hopper.queue_fail(1, 1, 'x', retry_in => '1 mon -1 day')$$);
SELECT pg_temp.try($$SELECT hopper.queue_pull('errs', 1, worker => '')$$);
SELECT pg_temp.try($$SELECT hopper.queue_pull('errs', 1, at => '-infinity')$$);
-- kind = ANY(kinds) would flatten a two-dimensional filter and match jobs it does not name.
SELECT pg_temp.try($$SELECT hopper.queue_pull('errs', 1, kinds => ARRAY[['a'], ['b']])$$);
SELECT pg_temp.try($$SELECT hopper.queue_take('errs', 1, kinds => ARRAY[['a'], ['b']])$$);
SELECT pg_temp.try($$SELECT hopper.queue_complete_pull(NULL, NULL, NULL, 'errs', 1,
                                                       kinds => ARRAY[['a'], ['b']])$$);
-- An unknown queue has nothing to pull: not an error (workers may start before the first push).
SELECT count(*) AS from_unknown FROM hopper.queue_pull('never-pushed', 5);

-- Unknown job ids are errors (P0002); NULL ids and tokens are 22004
SELECT pg_temp.try($$SELECT hopper.queue_complete(987654321, 1)$$);
SELECT pg_temp.try($$SELECT hopper.queue_fail(987654321, 1, 'x')$$);
SELECT pg_temp.try($$SELECT hopper.queue_heartbeat(987654321, 1)$$);
SELECT pg_temp.try($$SELECT hopper.queue_progress(987654321, 1, 0.5)$$);
SELECT pg_temp.try($$SELECT hopper.queue_release(987654321, 1)$$);
SELECT pg_temp.try($$SELECT hopper.queue_cancel(987654321)$$);
SELECT pg_temp.try($$SELECT hopper.queue_retry(987654321)$$);
SELECT pg_temp.try($$SELECT hopper.job_status(987654321)$$);
SELECT pg_temp.try($$SELECT hopper.queue_complete(NULL, 1)$$);
SELECT pg_temp.try($$SELECT hopper.queue_complete(1, NULL)$$);

-- Lease operations on the running job: bad values
SELECT pg_temp.try(format($$SELECT hopper.queue_progress(%s, %s, 1.5)$$, :pulled, :token));
SELECT pg_temp.try(format($$SELECT hopper.queue_progress(%s, %s, -0.1)$$, :pulled, :token));
-- Just past 1: the message names the value refused, not a rounded 1.
SELECT pg_temp.try(format($$SELECT hopper.queue_progress(%s, %s, 1.0000001)$$, :pulled, :token));
SELECT pg_temp.try(format($$SELECT hopper.queue_progress(%s, %s, 'NaN')$$, :pulled, :token));
SELECT pg_temp.try(format($$SELECT hopper.queue_progress(%s, %s, NULL)$$, :pulled, :token));
SELECT pg_temp.try(format($$SELECT hopper.queue_heartbeat(%s, %s, '-1 second')$$, :pulled, :token));
SELECT pg_temp.try(format($$SELECT hopper.queue_fail(%s, %s, 'x', retry_in => '-1 second')$$, :pulled, :token));
-- A wrong token is news, not an error
SELECT hopper.queue_complete(:pulled, :token + 1000) AS wrong_token_complete,
       hopper.queue_fail(:pulled, :token + 1000, 'x') AS wrong_token_fail,
       hopper.queue_heartbeat(:pulled, :token + 1000) AS wrong_token_heartbeat,
       hopper.queue_progress(:pulled, :token + 1000, 0.1) AS wrong_token_progress,
       hopper.queue_release(:pulled, :token + 1000) AS wrong_token_release;
-- Retry of a live job is refused with its state
SELECT pg_temp.try(format($$SELECT hopper.queue_retry(%s)$$, :pulled));

-- Queue administration
SELECT pg_temp.try($$SELECT hopper.queue_create('errs', max_attempts => 0)$$);
SELECT pg_temp.try($$SELECT hopper.queue_create('errs', lease => '0 s')$$);
SELECT pg_temp.try($$SELECT hopper.queue_create('errs', backoff_base => '2 days')$$);
SELECT pg_temp.try($$SELECT hopper.queue_create('errs', jitter => 1.5)$$);
SELECT pg_temp.try($$SELECT hopper.queue_pause('nope')$$);
SELECT pg_temp.try($$SELECT hopper.queue_resume('nope')$$);
SELECT pg_temp.try($$SELECT hopper.queue_purge('nope')$$);
SELECT pg_temp.try($$SELECT * FROM hopper.queue_stats('nope')$$);
SELECT hopper.queue_drop('nope') AS dropped_unknown;
SELECT pg_temp.try($$SELECT hopper.ensure_history_partitions(-1)$$);
SELECT pg_temp.try($$SELECT hopper.ensure_history_partitions(100000)$$);
SELECT pg_temp.try($$SELECT hopper.ensure_history_partitions(NULL)$$);
SET hopper.auto_create_queues = off;
SELECT pg_temp.try($$SELECT hopper.queue_push('not-created', '{}')$$);
RESET hopper.auto_create_queues;

-- Nothing above changed the queue: still the one running job, and the two valid pushes elsewhere.
SELECT queue, available, scheduled, running, completed, dead, cancelled FROM hopper.queue_stats('errs');
SELECT state, attempt FROM hopper.job_status(:pulled);

-- An error PostgreSQL raises under a hopper function reaches the caller whole: the constraint,
-- table and column it names and where it came from, as error handlers and drivers read them.
SELECT hopper.queue_create('errs_fields') AS created;
CREATE FUNCTION regress_refuse_job() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'no jobs today' USING ERRCODE = '23514', CONSTRAINT = 'regress_rule',
        TABLE = 'jobs', SCHEMA = 'hopper', COLUMN = 'payload', DATATYPE = 'jsonb';
END $$;
CREATE FUNCTION pg_temp.fields(call text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE st text; sch text; tab text; col text; typ text; con text; ctx text;
BEGIN
    EXECUTE call;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE, sch = SCHEMA_NAME, tab = TABLE_NAME,
        col = COLUMN_NAME, typ = PG_DATATYPE_NAME, con = CONSTRAINT_NAME, ctx = PG_EXCEPTION_CONTEXT;
    RETURN pg_catalog.concat_ws(' ', st, sch, tab, col, typ, con,
        CASE WHEN ctx LIKE '%regress_refuse_job() line%' THEN 'with the trigger''s context'
             ELSE 'without the trigger''s context' END,
        -- the caller's own frame, once
        (pg_catalog.length(ctx) - pg_catalog.length(pg_catalog.replace(ctx, 'fields(text) line', '')))
            / pg_catalog.length('fields(text) line'));
END $$;
CREATE TRIGGER regress_refuse_job BEFORE INSERT ON hopper.jobs
    FOR EACH ROW EXECUTE FUNCTION regress_refuse_job();
SELECT pg_temp.fields($$SELECT hopper.queue_push('errs_fields', '{}')$$) AS push;
SELECT pg_temp.fields($$SELECT hopper.queue_push('errs_fields', '{}', dedup_key => 'k')$$) AS keyed_push;
SELECT pg_temp.fields($$SELECT hopper.queue_push_batch('errs_fields', ARRAY['{}']::jsonb[])$$) AS batch;
DROP TRIGGER regress_refuse_job ON hopper.jobs;
DROP FUNCTION regress_refuse_job();
-- A constraint of the table's own, checked by the push's insert.
ALTER TABLE hopper.jobs ADD CONSTRAINT regress_small_payload CHECK (pg_catalog.pg_column_size(payload) < 100);
SELECT pg_temp.fields($$SELECT hopper.queue_push('errs_fields', pg_catalog.jsonb_build_object('x', pg_catalog.repeat('a', 200)))$$) AS big_push;
ALTER TABLE hopper.jobs DROP CONSTRAINT regress_small_payload;
SELECT available FROM hopper.queue_stats('errs_fields');
SELECT hopper.queue_drop('errs_fields') AS dropped;
