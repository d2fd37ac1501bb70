-- The reaper runs as a superuser and reaches hopper's objects by the name hopper.*. A schema named
-- hopper that someone else owns, that lets others create in it, or that already holds objects is
-- refused at install; and a reaper that finds the name leading anywhere but the extension's own
-- schema (renamed by a superuser) runs nothing there.
\set orig :DBNAME
SET client_min_messages = warning;
DROP DATABASE IF EXISTS hopper_schema WITH (FORCE);
DROP ROLE IF EXISTS regress_schema_owner;
CREATE ROLE regress_schema_owner;
CREATE DATABASE hopper_schema;
\c hopper_schema
SET client_min_messages = warning;
\set VERBOSITY sqlstate
CREATE SCHEMA hopper AUTHORIZATION regress_schema_owner;
CREATE EXTENSION hopper;
\set VERBOSITY default
CREATE EXTENSION hopper;
ALTER SCHEMA hopper OWNER TO CURRENT_USER;
GRANT CREATE ON SCHEMA hopper TO PUBLIC;
CREATE EXTENSION hopper;
REVOKE CREATE ON SCHEMA hopper FROM PUBLIC;
CREATE TABLE hopper.reaper_control (stopped boolean);
CREATE EXTENSION hopper;
DROP TABLE hopper.reaper_control;
-- Empty, a superuser's, and nobody else may create in it: installed, with the grants it makes.
CREATE EXTENSION hopper;
SELECT extname, extnamespace::regnamespace AS schema FROM pg_extension WHERE extname = 'hopper';
\i sql/include/wait_for.sql
SELECT pg_temp.wait_for($$EXISTS (SELECT 1 FROM pg_temp.my_reaper WHERE last_run IS NOT NULL)$$)
    AS reaper_running;
-- The extension's schema renamed, and a schema of the old name made in its place holding what the
-- reaper reads: the reaper leaves at its next pass without reading the planted view.
CREATE TABLE public.planted_calls (at timestamptz);
ALTER SCHEMA hopper RENAME TO hopper_moved;
CREATE SCHEMA hopper;
CREATE FUNCTION hopper.planted() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.planted_calls VALUES (now());
    RETURN false;
END $$;
CREATE VIEW hopper.reaper_control AS SELECT hopper.planted() AS stopped;
CREATE VIEW hopper.queues AS SELECT 'q'::text AS name WHERE hopper.planted();
SELECT pg_temp.wait_for($$NOT EXISTS (SELECT 1 FROM hopper_moved.reaper_status()
                                      WHERE database = current_database())$$) AS reaper_left;
SELECT pg_sleep(1.5);
SELECT count(*) AS planted_calls FROM public.planted_calls;
\c :orig
DROP DATABASE hopper_schema WITH (FORCE);
DROP ROLE regress_schema_owner;
