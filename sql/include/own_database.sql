-- own_database.sql: new_database.sql with hopper installed and autovacuum off on hopper.jobs, so
-- that the table holds only the test's rows and nothing else touches them.
\i sql/include/new_database.sql
CREATE EXTENSION hopper;
ALTER TABLE hopper.jobs SET (autovacuum_enabled = off);
