-- Finished jobs reach hopper.job_history's partitions straight when the partition is a plain
-- table with the history's own columns: each row must land where the INSERT's routing puts it
-- (the partition of its finished_at, else the default one), checked as any INSERT is checked,
-- and in every index of its partition. A partition laid out otherwise, or none at all, must
-- give what the INSERT gives.
--
-- In a database of its own: the test detaches and attaches history partitions.
\set own_db hopper_history_routing
\i sql/include/own_database.sql
SET hopper.notify = off;
\i sql/include/try.sql
SELECT hopper.queue_create('hr') AS created;
-- try() with today's partition named without its date, so that the output stays the same.
CREATE FUNCTION pg_temp.try_dated(sql text) RETURNS text LANGUAGE sql AS $$
    SELECT regexp_replace(pg_temp.try(sql), '_p[0-9]{8}', '_pYYYYMMDD')
$$;

-- Where the INSERT's routing puts a history row finished at `at`: a probe row, rolled back.
CREATE FUNCTION pg_temp.routed_to(at timestamptz) RETURNS regclass LANGUAGE plpgsql AS $$
DECLARE
    part regclass;
BEGIN
    BEGIN
        INSERT INTO hopper.job_history (id, queue, state, priority, run_at, attempt,
                                        max_attempts, created_at, finished_at, payload)
        VALUES (-1, 'probe', 'completed', 0, at, 1, 1, at, at, '{}')
        RETURNING tableoid::regclass INTO part;
        RAISE SQLSTATE 'HRPRB';
    EXCEPTION WHEN SQLSTATE 'HRPRB' THEN
        RETURN part;
    END;
END $$;
-- Finishes three jobs of queue hr, one each way: taken, leased and completed, leased and
-- completed with the next pull. Their history rows are tagged `tag` through the worker column.
CREATE FUNCTION pg_temp.finish_three(tag text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    j record;
BEGIN
    PERFORM hopper.queue_push_batch('hr', ARRAY[jsonb_build_object('tag', tag, 'n', 1),
                                                jsonb_build_object('tag', tag, 'n', 2),
                                                jsonb_build_object('tag', tag, 'n', 3)]);
    PERFORM hopper.queue_take('hr', 1, worker => tag);
    SELECT * INTO j FROM hopper.queue_pull('hr', 1, worker => tag);
    PERFORM hopper.queue_complete(j.id, j.lease_token, '{"r": 1}');
    SELECT * INTO j FROM hopper.queue_pull('hr', 1, worker => tag);
    PERFORM hopper.queue_complete_pull(j.id, j.lease_token, '{"r": 2}', 'hr', 1);
END $$;
-- The rows tagged `tag`: where they are against where the INSERT would put them, and their
-- values, read by name.
CREATE FUNCTION pg_temp.report(tag text)
RETURNS TABLE (rows bigint, where_routed bool, part text, payloads text, results text,
               states text, sane bool) LANGUAGE sql AS $$
    SELECT count(*), bool_and(tableoid::regclass = pg_temp.routed_to(finished_at)),
           regexp_replace(string_agg(DISTINCT tableoid::regclass::text, ','), '_p[0-9]{8}$',
                          '_pYYYYMMDD'),
           string_agg(payload->>'n', ',' ORDER BY payload->>'n'),
           string_agg(COALESCE(result->>'r', '-'), ',' ORDER BY payload->>'n'),
           string_agg(DISTINCT state::text, ','),
           bool_and(queue = 'hr' AND payload->>'tag' = tag AND attempt = 1
                    AND started_at <= finished_at
                    AND finished_at BETWEEN now() AND clock_timestamp() AND progress = 1)
    FROM hopper.job_history WHERE worker = tag
$$;
-- Both in one transaction, so that finished_at is between its start and now.
CREATE FUNCTION pg_temp.finish_and_report(tag text)
RETURNS TABLE (rows bigint, where_routed bool, part text, payloads text, results text,
               states text, sane bool) LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_temp.finish_three(tag);
    RETURN QUERY SELECT * FROM pg_temp.report(tag);
END $$;
-- Creates hopper.<name> with the history's columns in the order `ordering` (an expression over
-- pg_attribute's attnum and attname) gives them.
CREATE FUNCTION pg_temp.create_reordered(name text, ordering text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    columns text;
BEGIN
    EXECUTE format($q$
        SELECT string_agg(format('%%I %%s%%s', attname, format_type(atttypid, atttypmod),
                                 CASE WHEN attnotnull THEN ' NOT NULL' ELSE '' END),
                          ', ' ORDER BY %s)
        FROM pg_attribute
        WHERE attrelid = 'hopper.job_history'::regclass AND attnum > 0 AND NOT attisdropped
    $q$, ordering) INTO columns;
    EXECUTE format('CREATE TABLE hopper.%I (%s)', name, columns);
END $$;
SELECT 'hopper.job_history_p' || to_char((now() AT TIME ZONE 'UTC')::date, 'YYYYMMDD')
    AS today \gset
SELECT format('FOR VALUES FROM (%L) TO (%L)', (now() AT TIME ZONE 'UTC')::date || ' 00:00+00',
              (now() AT TIME ZONE 'UTC')::date + 1 || ' 00:00+00') AS today_bounds \gset

-- Today's partition, as the extension made it.
SELECT * FROM pg_temp.finish_and_report('plain');
SELECT count(*) AS in_today FROM :today WHERE worker = 'plain';

-- Its CHECK constraints hold for the rows written straight: the refused take, completion and
-- combined call leave their jobs as they were.
ALTER TABLE :today ADD CONSTRAINT hr_no_banned CHECK (worker IS DISTINCT FROM 'banned');
SELECT count(*) AS pushed FROM hopper.queue_push_batch('hr', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[]);
SELECT pg_temp.try_dated($$SELECT hopper.queue_take('hr', 1, worker => 'banned')$$) AS take;
SELECT id, lease_token AS tok FROM hopper.queue_pull('hr', 1) \gset
UPDATE hopper.jobs SET worker = 'banned' WHERE id = :id;
SELECT pg_temp.try_dated(format('SELECT hopper.queue_complete(%s, %s)', :id, :tok)) AS complete;
SELECT pg_temp.try_dated(format($$SELECT hopper.queue_complete_pull(%s, %s, NULL, 'hr', 1)$$, :id, :tok))
    AS complete_pull;
SELECT state, count(*) FROM hopper.jobs WHERE queue = 'hr' GROUP BY state ORDER BY state;
ALTER TABLE :today DROP CONSTRAINT hr_no_banned;
UPDATE hopper.jobs SET worker = NULL WHERE id = :id;
SELECT hopper.queue_complete(:id, :tok) AS completed;
SELECT count(*) AS taken FROM hopper.queue_take('hr', 5);

-- An index made on the partition after this session wrote to it gets the next rows.
CREATE INDEX hr_worker_idx ON :today (worker);
SELECT pg_temp.finish_three('indexed');
-- amcheck's heapallindexed check fails for a row the index lacks.
CREATE EXTENSION amcheck;
SELECT pg_temp.try($$SELECT bt_index_check('hopper.hr_worker_idx', true)$$) AS every_row_indexed;
SELECT count(*) AS rows_of_the_tag FROM :today WHERE worker = 'indexed';
DROP INDEX hopper.hr_worker_idx;

-- Today's partition replaced by one whose columns are in another order: the rows still go there,
-- each value in its column.
ALTER TABLE hopper.job_history DETACH PARTITION :today;
SELECT pg_temp.create_reordered('hr_reversed', '-attnum');
ALTER TABLE hopper.job_history ATTACH PARTITION hopper.hr_reversed :today_bounds;
SELECT * FROM pg_temp.finish_and_report('reversed');

-- And by one where only two columns of the same type, kind and worker, trade places.
ALTER TABLE hopper.job_history DETACH PARTITION hopper.hr_reversed;
SELECT pg_temp.create_reordered('hr_swapped',
                                'attnum + CASE attname WHEN ''kind'' THEN 1.5 ELSE 0 END');
ALTER TABLE hopper.job_history ATTACH PARTITION hopper.hr_swapped :today_bounds;
SELECT * FROM pg_temp.finish_and_report('swapped');
SELECT count(*) AS kind_still_null FROM hopper.job_history WHERE worker = 'swapped' AND kind IS NULL;

-- And by one that has the same columns after a dropped one.
ALTER TABLE hopper.job_history DETACH PARTITION hopper.hr_swapped;
CREATE TABLE hopper.hr_dropped (spare integer,
    LIKE hopper.job_history INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
ALTER TABLE hopper.hr_dropped DROP COLUMN spare;
ALTER TABLE hopper.job_history ATTACH PARTITION hopper.hr_dropped :today_bounds;
SELECT * FROM pg_temp.finish_and_report('dropped');

-- No partition for today: the default one.
ALTER TABLE hopper.job_history DETACH PARTITION hopper.hr_dropped;
SELECT * FROM pg_temp.finish_and_report('default');

-- Nor a default one: every way of finishing a job fails as the INSERT does, and the jobs stay.
ALTER TABLE hopper.job_history DETACH PARTITION hopper.job_history_default;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('hr', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[]);
SELECT pg_temp.try($$SELECT hopper.queue_take('hr', 1)$$) AS take;
SELECT id, lease_token AS tok FROM hopper.queue_pull('hr', 1) \gset
SELECT pg_temp.try(format('SELECT hopper.queue_complete(%s, %s)', :id, :tok)) AS complete;
SELECT pg_temp.try(format('SELECT hopper.queue_complete_many(ARRAY[%s], ARRAY[%s])', :id, :tok))
    AS complete_many;
SELECT state, count(*) FROM hopper.jobs WHERE queue = 'hr' GROUP BY state ORDER BY state;

-- Put back (without the default partition's rows of today, which would keep today's partition
-- out), the partitions take rows straight again.
DELETE FROM hopper.job_history_default WHERE queue = 'hr';
ALTER TABLE hopper.job_history ATTACH PARTITION hopper.job_history_default DEFAULT;
ALTER TABLE hopper.job_history ATTACH PARTITION :today :today_bounds;
SELECT hopper.queue_complete(:id, :tok) AS completed;
SELECT count(*) AS taken FROM hopper.queue_take('hr', 5);
SELECT * FROM pg_temp.finish_and_report('back');
SELECT count(*) AS in_today FROM :today WHERE worker = 'back';
SELECT count(*) AS left_in_queue FROM hopper.jobs WHERE queue = 'hr';

SELECT hopper.queue_drop('hr') AS dropped;
\c :regression_db
DROP DATABASE :"own_db";
