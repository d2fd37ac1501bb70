-- A session that pushed remembers hopper's tables (their OIDs, the column map). When the
-- extension is dropped and made again, that memory must go: the session's next pushes, single
-- and batch, land in the new table, and a take finds them there.
\set orig :DBNAME
SET client_min_messages = warning;
-- Left behind only by a run that stopped in the middle of this file.
DROP DATABASE IF EXISTS hopper_reinstall WITH (FORCE);
CREATE DATABASE hopper_reinstall;
\c hopper_reinstall
SET client_min_messages = warning;
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
\c :orig
DROP DATABASE hopper_reinstall WITH (FORCE);
