-- own_database.sql: moves the test into a new database named by :own_db, with hopper installed
-- and autovacuum off on hopper.jobs, so that the table holds only the test's rows and nothing
-- else touches them. :regression_db names the database to return to (\c :regression_db, then
-- DROP DATABASE :own_db). One left behind by a run that stopped half-way is dropped first.
SELECT pg_catalog.current_database() AS regression_db \gset
SET client_min_messages = warning;
DROP DATABASE IF EXISTS :"own_db";
RESET client_min_messages;
CREATE DATABASE :"own_db";
\c :own_db
CREATE EXTENSION hopper;
ALTER TABLE hopper.jobs SET (autovacuum_enabled = off);
