-- A session that pushed remembers hopper's tables (their OIDs, the column map). When the
-- extension is dropped and made again, that memory must go: the session's next pushes, single
-- and batch, land in the new table, and a take finds them there.
\set own_db hopper_reinstall
\i sql/include/new_database.sql
CREATE EXTENSION hopper;
SELECT hopper.queue_push('again', '{"n": 1}') AS first_id;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('again',
    ARRAY['{"n": 2}', '{"n": 3}']::jsonb[]);
DROP EXTENSION hopper;
CREATE EXTENSION hopper;
SELECT hopper.queue_push('again', '{"n": 4}') AS id_after;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('again', ARRAY['{"n": 5}']::jsonb[]);
SELECT id, payload->>'n' AS n FROM hopper.jobs ORDER BY id;
SELECT payload->>'n' AS n FROM hopper.queue_take('again', 10) ORDER BY id;
\c :regression_db
DROP DATABASE :"own_db" WITH (FORCE);
