-- A database of its own, for what only a fresh install shows: the install under a DateStyle
-- whose dates do not read back as written, and the first calls before any job was pushed.
\set own_db hopper_fresh
\i sql/include/new_database.sql
-- 'SQL, YMD' prints a date as 11/26/2026 and reads that back as a month of 26: the daily history
-- partitions' bounds are written in ISO whatever the session's style.
SET datestyle = 'SQL, YMD';
CREATE EXTENSION hopper;
SELECT count(*) AS daily_partitions FROM pg_inherits
    WHERE inhparent = 'hopper.job_history'::regclass
      AND inhrelid::regclass::text ~ '^hopper\.job_history_p[0-9]{8}$';
-- The reaper makes the days ahead under the database's style, as a session does here.
SET datestyle = 'Postgres, YMD';
SELECT hopper.ensure_history_partitions(9) AS made;
RESET datestyle;
-- No job was pushed yet: id 1 was never issued, and is unknown (P0002), not a lost lease.
\set VERBOSITY terse
SELECT hopper.queue_complete(1, 1);
SELECT hopper.queue_heartbeat(1, 1);
SELECT hopper.queue_cancel(1);
SELECT hopper.queue_push('fresh', '{}') AS first_id;
SELECT hopper.queue_complete(2, 1);
-- A count at the integer's end (a row written by hand): the direct claim refuses it as the
-- statements do, rather than wrapping it round to a negative count of attempts. (Here, in a
-- database of its own, the pull without kinds is the direct claim.)
\i sql/include/try.sql
SELECT hopper.queue_create('direct-max') AS created;
INSERT INTO hopper.jobs (queue, run_at, attempt, max_attempts, created_at, payload, kind)
VALUES ('direct-max', now(), 2147483647, 5, now(), '{}', 'k');
SELECT pg_temp.try($$SELECT attempt FROM hopper.queue_pull('direct-max', 1)$$) AS pull_direct;
SELECT pg_temp.try($$SELECT attempt FROM hopper.queue_pull('direct-max', 1, kinds => ARRAY['k'])$$)
    AS pull_statements;
SELECT attempt FROM hopper.jobs WHERE queue = 'direct-max';
SELECT hopper.queue_drop('direct-max') AS dropped;
\c :regression_db
DROP DATABASE :"own_db" WITH (FORCE);
