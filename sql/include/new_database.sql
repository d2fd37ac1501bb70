-- new_database.sql: moves the test into a new, empty database named by :own_db, where it installs
-- hopper itself (under settings of its own, say). :regression_db names the database to return to
-- (\c :regression_db, then DROP DATABASE :own_db). One left behind by a run that stopped half-way
-- is dropped first, with any session still connected to it (its reaper).
SELECT pg_catalog.current_database() AS regression_db \gset
SET client_min_messages = warning;
DROP DATABASE IF EXISTS :"own_db" WITH (FORCE);
RESET client_min_messages;
CREATE DATABASE :"own_db";
\c :own_db
