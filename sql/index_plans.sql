-- hopper's hot statements on hopper.jobs keep walking its indexes whatever the statistics said when
-- their cached plans were made. Here they are made while the table is small and every job in it
-- runs with a lease, where reading the table beats any index; then the table fills with jobs that
-- wait for later, and a pull that finds nothing due asks for expired leases with the plans it made.
SET hopper.notify = off;
ALTER TABLE hopper.jobs SET (autovacuum_enabled = off);
SELECT hopper.queue_create('plans') AS created;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('plans',
    ARRAY(SELECT pg_catalog.jsonb_build_object('n', g) FROM generate_series(1, 100) g));
SELECT count(*) AS pulled FROM hopper.queue_pull('plans', 100, lease => '1 hour');
ANALYZE hopper.jobs;

-- A new session makes its plans now, with nothing due.
\c
SELECT count(*) AS due FROM hopper.queue_pull('plans', 10);
SELECT count(*) AS completed FROM hopper.queue_complete_many(
    ARRAY(SELECT id FROM hopper.jobs WHERE queue = 'plans' ORDER BY id),
    ARRAY(SELECT lease_token FROM hopper.jobs WHERE queue = 'plans' ORDER BY id));
SELECT count(*) AS scheduled FROM generate_series(0, 19) s, LATERAL hopper.queue_push_batch('plans',
    ARRAY(SELECT pg_catalog.jsonb_build_object('n', g) FROM generate_series(1, 1000) g),
    run_at => pg_catalog.now() + interval '1 hour');

-- The same session's scans of hopper.jobs during one pull (counts not yet reported at the end of a
-- transaction are reported at most once a second, so the pull's own are the difference).
BEGIN;
SELECT seq_scan AS seq_before, idx_scan AS idx_before
FROM pg_catalog.pg_stat_xact_user_tables WHERE relid = 'hopper.jobs'::pg_catalog.regclass \gset
SELECT count(*) AS due FROM hopper.queue_pull('plans', 10);
SELECT seq_scan - :seq_before AS sequential_scans, idx_scan > :idx_before AS used_indexes
FROM pg_catalog.pg_stat_xact_user_tables WHERE relid = 'hopper.jobs'::pg_catalog.regclass;
ROLLBACK;

SELECT hopper.queue_drop('plans') AS dropped;

-- queue_stats of a small queue reads that queue's entries of the indexes of available and of
-- running jobs, not the whole of hopper.jobs with another queue's thousands of jobs in it.
SELECT hopper.queue_create('stats_big', lease => '1 hour') AS created;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('stats_big',
    ARRAY(SELECT pg_catalog.jsonb_build_object('n', g) FROM generate_series(1, 3000) g));
SELECT count(*) AS pulled FROM hopper.queue_pull('stats_big', 500);
SELECT hopper.queue_create('stats_small', lease => '1 hour') AS created;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('stats_small', ARRAY['{}', '{}', '{}']::jsonb[]);
SELECT hopper.queue_push('stats_small', '{}', run_at => pg_catalog.now() + interval '1 hour') > 0
    AS scheduled;
SELECT count(*) AS pulled FROM hopper.queue_pull('stats_small', 1);
ANALYZE hopper.jobs;
BEGIN;
SELECT seq_scan AS seq_before, idx_tup_fetch AS fetched_before
FROM pg_catalog.pg_stat_xact_user_tables WHERE relid = 'hopper.jobs'::pg_catalog.regclass \gset
SELECT pg_catalog.pg_stat_get_xact_tuples_returned('hopper.jobs_pull_idx'::pg_catalog.regclass)
    + pg_catalog.pg_stat_get_xact_tuples_returned('hopper.jobs_lease_idx'::pg_catalog.regclass)
    AS entries_before \gset
SELECT queue, available, scheduled, running, oldest_available_age IS NOT NULL AS has_age
FROM hopper.queue_stats('stats_small');
-- (The pulled job's entry in jobs_pull_idx may be read too, dead: nothing has vacuumed it.)
SELECT seq_scan - :seq_before AS sequential_scans, idx_tup_fetch - :fetched_before < 10 AS few_rows
FROM pg_catalog.pg_stat_xact_user_tables WHERE relid = 'hopper.jobs'::pg_catalog.regclass;
SELECT pg_catalog.pg_stat_get_xact_tuples_returned('hopper.jobs_pull_idx'::pg_catalog.regclass)
    + pg_catalog.pg_stat_get_xact_tuples_returned('hopper.jobs_lease_idx'::pg_catalog.regclass)
    - :entries_before BETWEEN 4 AND 9 AS its_entries_alone;
ROLLBACK;
-- queue_jobs(queue, 'scheduled') of a queue with thousands of due jobs reads the few that wait,
-- from jobs_delayed_idx, not every due job of the queue to find them.
SELECT hopper.queue_push('stats_big', '{}', run_at => pg_catalog.now() + interval '1 hour') > 0
    AS scheduled;
BEGIN;
SELECT seq_scan AS seq_before, idx_tup_fetch AS fetched_before
FROM pg_catalog.pg_stat_xact_user_tables WHERE relid = 'hopper.jobs'::pg_catalog.regclass \gset
SELECT pg_catalog.pg_stat_get_xact_tuples_returned('hopper.jobs_delayed_idx'::pg_catalog.regclass)
    AS delayed_before \gset
SELECT count(*) AS waiting FROM hopper.queue_jobs('stats_big', 'scheduled');
SELECT seq_scan - :seq_before AS sequential_scans, idx_tup_fetch - :fetched_before < 10 AS few_rows
FROM pg_catalog.pg_stat_xact_user_tables WHERE relid = 'hopper.jobs'::pg_catalog.regclass;
SELECT pg_catalog.pg_stat_get_xact_tuples_returned('hopper.jobs_delayed_idx'::pg_catalog.regclass)
    > :delayed_before AS read_delayed_entries;
ROLLBACK;
-- Every queue, counted the same way.
SELECT queue, available, scheduled, running FROM hopper.queue_stats() WHERE queue LIKE 'stats%';
SELECT hopper.queue_drop('stats_big') AS dropped, hopper.queue_drop('stats_small') AS dropped;
ALTER TABLE hopper.jobs RESET (autovacuum_enabled);

-- A claim whose plans were made on an empty hopper.jobs (a fresh database, just vacuumed) looks the
-- ids it locked up by primary key once the table has filled; a join could walk the whole key.
\set own_db hopper_index_plans
\i sql/include/own_database.sql
SET hopper.notify = off;
SELECT hopper.queue_create('plans') AS created;
VACUUM ANALYZE hopper.jobs;
\c
SELECT count(*) AS due FROM hopper.queue_pull('plans', 5);
SELECT count(*) AS pushed FROM generate_series(0, 19) s, LATERAL hopper.queue_push_batch('plans',
    ARRAY(SELECT pg_catalog.jsonb_build_object('n', g) FROM generate_series(1, 1000) g));
BEGIN;
SELECT pg_catalog.pg_stat_get_xact_tuples_returned('hopper.jobs_pkey'::pg_catalog.regclass)
    AS pkey_before \gset
SELECT count(*) AS claimed FROM hopper.queue_pull('plans', 5);
SELECT pg_catalog.pg_stat_get_xact_tuples_returned('hopper.jobs_pkey'::pg_catalog.regclass)
    - :pkey_before < 100 AS looked_up;
ROLLBACK;
\c :regression_db
DROP DATABASE :"own_db";
