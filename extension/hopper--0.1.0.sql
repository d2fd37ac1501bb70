-- hopper 0.1.0: a durable job queue inside PostgreSQL.
\echo Use "CREATE EXTENSION hopper" to load this file. \quit

-- The reaper runs as a superuser and reaches every object here by the name hopper.*: the schema
-- and whatever is in it must be a superuser's. A schema named hopper that existed before (CREATE
-- EXTENSION then uses it as it is) must be a superuser's, empty, and give CREATE to no one else;
-- otherwise its owner could plant a table or a function there that the reaper would run.
DO $schema$
DECLARE
    ns oid := 'hopper'::pg_catalog.regnamespace;
    owner name;
BEGIN
    SELECT r.rolname INTO owner FROM pg_catalog.pg_namespace n
        JOIN pg_catalog.pg_roles r ON r.oid = n.nspowner
        WHERE n.oid = ns AND NOT r.rolsuper;
    IF owner IS NOT NULL THEN
        RAISE EXCEPTION 'schema hopper is owned by role %, which is not a superuser', owner
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'Drop the schema, or give it to a superuser (ALTER SCHEMA hopper OWNER TO '
                         'postgres), before CREATE EXTENSION hopper.';
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_namespace n,
                   LATERAL pg_catalog.aclexplode(n.nspacl) a
                   LEFT JOIN pg_catalog.pg_roles r ON r.oid = a.grantee
               WHERE n.oid = ns AND a.privilege_type = 'CREATE'
                 AND NOT COALESCE(r.rolsuper, false)) THEN
        RAISE EXCEPTION 'schema hopper gives CREATE to a role that is not a superuser'
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'REVOKE CREATE ON SCHEMA hopper FROM that role (or PUBLIC) first.';
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_depend d
               WHERE d.refclassid = 'pg_catalog.pg_namespace'::pg_catalog.regclass
                 AND d.refobjid = ns
                 AND d.classid <> 'pg_catalog.pg_extension'::pg_catalog.regclass) THEN
        RAISE EXCEPTION 'schema hopper already holds objects'
            USING ERRCODE = 'duplicate_schema',
                  HINT = 'CREATE EXTENSION hopper needs the schema empty (or absent).';
    END IF;
END
$schema$;

-- Roles a deployment grants to its producers and workers. Roles are cluster-wide, so they outlive the
-- extension and are shared by every database that installs it.
DO $roles$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hopper_producer') THEN
        CREATE ROLE hopper_producer NOLOGIN;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'hopper_worker') THEN
        CREATE ROLE hopper_worker NOLOGIN;
    END IF;
END
$roles$;

GRANT USAGE ON SCHEMA hopper TO hopper_producer, hopper_worker;

CREATE TYPE hopper.job_state AS ENUM ('available', 'running', 'completed', 'dead', 'cancelled');

-- Per-queue settings. A queue is created by queue_create() or by the first push to it.
-- The checks repeat what queue_create enforces: producers may insert names here directly (a push
-- makes its queue), a superuser may write any column, and the reaper, which runs as a superuser,
-- must never meet a name too long for a channel or a retention too large for a timestamp.
--
-- Durations are fixed lengths, kept in an interval's time part alone ('24:00:00', not '1 day'):
-- a timestamptz plus an interval adds days and months on the calendar of the session's TimeZone,
-- so that a lease of '1 day' pulled the day before a DST change lasted 23 or 25 hours. The
-- functions store them so (a day as 24 hours, a month as 30 days, as they check them), and the
-- checks below keep a row written by hand from holding days or months.
CREATE TABLE hopper.queues (
    name          text PRIMARY KEY
                  CHECK (name COLLATE "C" ~ '^[A-Za-z0-9][A-Za-z0-9_.:-]{0,47}$' AND name <> 'done'),
    max_attempts  integer  NOT NULL DEFAULT 5 CHECK (max_attempts BETWEEN 1 AND 1000),
    lease         interval NOT NULL DEFAULT '30 seconds'
                  CHECK (lease > interval '0' AND lease <= interval '1 day'),
    backoff_base  interval NOT NULL DEFAULT '1 second'
                  CHECK (backoff_base > interval '0' AND backoff_base <= interval '1 day'),
    backoff_cap   interval NOT NULL DEFAULT '1 hour'
                  CHECK (backoff_cap > interval '0' AND backoff_cap <= interval '30 days'),
    jitter        real     NOT NULL DEFAULT 0.2 CHECK (jitter >= 0 AND jitter <= 1),
    retention     interval NOT NULL DEFAULT '168 hours'
                  CHECK (retention >= interval '0' AND retention <= interval '3660 days'),
    paused        boolean  NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CONSTRAINT queues_durations_fixed CHECK (
        EXTRACT(day FROM lease) = 0 AND EXTRACT(month FROM lease) = 0
        AND EXTRACT(year FROM lease) = 0
        AND EXTRACT(day FROM backoff_base) = 0 AND EXTRACT(month FROM backoff_base) = 0
        AND EXTRACT(year FROM backoff_base) = 0
        AND EXTRACT(day FROM backoff_cap) = 0 AND EXTRACT(month FROM backoff_cap) = 0
        AND EXTRACT(year FROM backoff_cap) = 0
        AND EXTRACT(day FROM retention) = 0 AND EXTRACT(month FROM retention) = 0
        AND EXTRACT(year FROM retention) = 0)
);

CREATE SEQUENCE hopper.job_id_seq AS bigint;
-- Fencing tokens: a fresh value on every claim, so a token names one lease of one job.
CREATE SEQUENCE hopper.lease_token_seq AS bigint;

-- The hot table: live jobs only (available, scheduled = available with run_at ahead, running).
-- Finished jobs move to hopper.job_history, so scans here stay short however long the history.
CREATE TABLE hopper.jobs (
    id                    bigint PRIMARY KEY DEFAULT pg_catalog.nextval('hopper.job_id_seq'),
    queue                 text NOT NULL,
    state                 hopper.job_state NOT NULL DEFAULT 'available',
    priority              smallint NOT NULL DEFAULT 0,
    run_at                timestamptz NOT NULL,
    attempt               integer NOT NULL DEFAULT 0,
    max_attempts          integer NOT NULL,
    lease_token           bigint,
    lease_until           timestamptz,
    claimed_pid           integer,
    claimed_backend_start timestamptz,
    session_bound         boolean NOT NULL DEFAULT false,
    created_at            timestamptz NOT NULL,
    started_at            timestamptz,
    kind                  text,
    worker                text,
    dedup_key             text,
    concurrency_key       text,
    progress              real,
    last_error            text,
    errors                jsonb,
    progress_detail       jsonb,
    payload               jsonb NOT NULL
);
ALTER SEQUENCE hopper.job_id_seq OWNED BY hopper.jobs.id;

-- The claim scan: the first available jobs of a queue in pull order.
-- The pull indexes end in the job's id, so no two of their entries are equal: deduplication never
-- merges anything in them, and a push that finds a leaf full would pay for a pass that finds
-- nothing before the page splits anyway (bench/ANALYSIS.md, section 30).
CREATE INDEX jobs_pull_idx ON hopper.jobs (queue, priority, run_at, id)
    WITH (deduplicate_items = off) WHERE state = 'available';
-- Expired leases (pull's inline rescue and the reaper): lease_until is set exactly while a job runs.
-- The predicate is deliberately not "state = 'running'": the statements that find one running job by
-- (id, lease_token, state = 'running') must use the primary key, and with that predicate the planner
-- takes this index instead whenever its statistics say few jobs run, then reads every entry of it
-- (with a snapshot held open, every dead one too) to find one row. Queries on expired leases
-- qualify by "lease_until < ...", which implies this predicate.
CREATE INDEX jobs_lease_idx ON hopper.jobs (queue, lease_until) WHERE lease_until IS NOT NULL;
-- "A second push with the same key while the first is unfinished returns the first job."
CREATE UNIQUE INDEX jobs_dedup_idx ON hopper.jobs (queue, dedup_key) WHERE dedup_key IS NOT NULL;

-- pg_dump skips the rows of extension tables unless told otherwise: queues and live jobs are the
-- state a backup must keep.
SELECT pg_catalog.pg_extension_config_dump('hopper.queues', '');
SELECT pg_catalog.pg_extension_config_dump('hopper.jobs', '');
SELECT pg_catalog.pg_extension_config_dump('hopper.job_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('hopper.lease_token_seq', '');

-- Finished jobs (completed, dead, cancelled), partitioned by day of finished_at so that retention
-- drops whole partitions instead of deleting rows.
CREATE TABLE hopper.job_history (
    id                bigint NOT NULL,
    queue             text NOT NULL,
    state             hopper.job_state NOT NULL,
    priority          smallint NOT NULL,
    run_at            timestamptz NOT NULL,
    attempt           integer NOT NULL,
    max_attempts      integer NOT NULL,
    created_at        timestamptz NOT NULL,
    started_at        timestamptz,
    finished_at       timestamptz NOT NULL,
    kind              text,
    worker            text,
    dedup_key         text,
    concurrency_key   text,
    progress          real,
    last_error        text,
    errors            jsonb,
    progress_detail   jsonb,
    result            jsonb,
    payload           jsonb NOT NULL,
    -- A job is in history at most once (queue_retry takes it out before it runs again); the
    -- partition key is in the key because PostgreSQL requires it. It serves job_status's lookup
    -- by id, and is the replica identity that a publication needs for the deletes of retention,
    -- queue_retry and queue_drop: without one, any publication of all tables in the database
    -- (a CDC tool's, an upgrade's) made them fail.
    PRIMARY KEY (id, finished_at)
) PARTITION BY RANGE (finished_at);
CREATE INDEX job_history_queue_idx ON hopper.job_history (queue, state, finished_at);
-- Catches rows whose day has no partition yet (the reaper creates them ahead of time).
CREATE TABLE hopper.job_history_default PARTITION OF hopper.job_history DEFAULT;

-- Creates the daily history partitions from today through today + days_ahead (UTC days). Rows that
-- already sit in the default partition for such a day are moved into the new partition. At most a
-- year ahead: every partition is a table, and a mistyped count would make thousands under locks.
-- Each partition is made a member of the extension, as those CREATE EXTENSION makes are: pg_dump
-- then leaves them all out, and a restore runs cleanly (a partition dumped as a table of its own
-- is attached by the restore to a parent that already has its indexes, which the dump's own
-- index definitions then collide with). The history is not part of a dump; README "Storage".
CREATE FUNCTION hopper.ensure_history_partitions(days_ahead integer DEFAULT 3)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
DECLARE
    day date;
    part text;
    low text;
    high text;
    created integer := 0;
BEGIN
    IF days_ahead IS NULL THEN
        RAISE EXCEPTION 'days_ahead must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF days_ahead < 0 OR days_ahead > 366 THEN
        RAISE EXCEPTION 'days_ahead must be between 0 and 366, got %', days_ahead
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR i IN 0 .. days_ahead LOOP
        day := (pg_catalog.now() AT TIME ZONE 'UTC')::date + i;
        part := 'job_history_p' || pg_catalog.to_char(day, 'YYYYMMDD');
        CONTINUE WHEN pg_catalog.to_regclass('hopper.' || part) IS NOT NULL;
        -- Written in ISO whatever the session's DateStyle: under 'SQL, YMD' a date's text
        -- does not read back.
        low := pg_catalog.to_char(day, 'YYYY-MM-DD') || ' 00:00:00+00';
        high := pg_catalog.to_char(day + 1, 'YYYY-MM-DD') || ' 00:00:00+00';
        EXECUTE pg_catalog.format(
            'CREATE TABLE hopper.%I (LIKE hopper.job_history INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
        -- The lock ATTACH takes anyway, taken before the move: a completion that routed a row
        -- of the day into the default partition after the move's snapshot made ATTACH fail on
        -- every try while completions went on.
        LOCK TABLE hopper.job_history_default IN ACCESS EXCLUSIVE MODE;
        EXECUTE pg_catalog.format(
            'WITH moved AS (DELETE FROM hopper.job_history_default WHERE finished_at >= %L::timestamptz AND finished_at < %L::timestamptz RETURNING *) INSERT INTO hopper.%I SELECT * FROM moved',
            low, high, part);
        EXECUTE pg_catalog.format(
            'ALTER TABLE hopper.job_history ATTACH PARTITION hopper.%I FOR VALUES FROM (%L) TO (%L)',
            part, low, high);
        -- Inside CREATE EXTENSION it is a member already.
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
                       WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                         AND d.objid = pg_catalog.to_regclass('hopper.' || part)
                         AND d.deptype = 'e') THEN
            EXECUTE pg_catalog.format('ALTER EXTENSION hopper ADD TABLE hopper.%I', part);
        END IF;
        created := created + 1;
    END LOOP;
    RETURN created;
END
$fn$;
SELECT hopper.ensure_history_partitions(7);

-- What queue_pull returns: one leased job.
CREATE TYPE hopper.leased_job AS (
    id          bigint,
    queue       text,
    kind        text,
    payload     jsonb,
    attempt     integer,
    lease_token bigint,
    lease_until timestamptz,
    run_at      timestamptz,
    created_at  timestamptz
);

-- What job_status returns, wherever the job is (hot table or history).
CREATE TYPE hopper.job_info AS (
    id              bigint,
    queue           text,
    kind            text,
    state           text,
    attempt         integer,
    max_attempts    integer,
    priority        smallint,
    run_at          timestamptz,
    created_at      timestamptz,
    started_at      timestamptz,
    finished_at     timestamptz,
    worker          text,
    last_error      text,
    errors          jsonb,
    result          jsonb,
    progress        real,
    progress_detail jsonb,
    payload         jsonb
);

-- What queue_stats returns, one row per queue.
CREATE TYPE hopper.queue_stat AS (
    queue                text,
    available            bigint,
    scheduled            bigint,
    running              bigint,
    completed            bigint,
    dead                 bigint,
    cancelled            bigint,
    oldest_available_age interval,
    paused               boolean
);

-- ---------------------------------------------------------------------------------------------------
-- Queues
CREATE FUNCTION hopper.queue_create(
    queue text,
    max_attempts integer DEFAULT NULL,
    lease interval DEFAULT NULL,
    backoff_base interval DEFAULT NULL,
    backoff_cap interval DEFAULT NULL,
    retention interval DEFAULT NULL,
    jitter real DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME', 'hopper_queue_create' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION hopper.queue_drop(queue text)
RETURNS boolean AS 'MODULE_PATHNAME', 'hopper_queue_drop' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION hopper.queue_pause(queue text)
RETURNS void AS 'MODULE_PATHNAME', 'hopper_queue_pause' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION hopper.queue_resume(queue text)
RETURNS void AS 'MODULE_PATHNAME', 'hopper_queue_resume' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION hopper.queue_purge(queue text)
RETURNS bigint AS 'MODULE_PATHNAME', 'hopper_queue_purge' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- ---------------------------------------------------------------------------------------------------
-- Producers
CREATE FUNCTION hopper.queue_push(
    queue text,
    payload jsonb,
    run_at timestamptz DEFAULT NULL,
    priority integer DEFAULT 0,
    kind text DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    dedup_key text DEFAULT NULL,
    concurrency_key text DEFAULT NULL,
    dedup_window interval DEFAULT NULL)
RETURNS bigint AS 'MODULE_PATHNAME', 'hopper_queue_push' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION hopper.queue_push_batch(
    queue text,
    payloads jsonb[],
    run_at timestamptz DEFAULT NULL,
    priority integer DEFAULT 0,
    kind text DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    dedup_keys text[] DEFAULT NULL,
    concurrency_keys text[] DEFAULT NULL,
    dedup_window interval DEFAULT NULL)
RETURNS SETOF bigint AS 'MODULE_PATHNAME', 'hopper_queue_push_batch'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

-- ---------------------------------------------------------------------------------------------------
-- Workers
CREATE FUNCTION hopper.queue_pull(
    queue text,
    n integer DEFAULT 1,
    lease interval DEFAULT NULL,
    worker text DEFAULT NULL,
    kinds text[] DEFAULT NULL,
    at timestamptz DEFAULT NULL,
    session_bound boolean DEFAULT false,
    wait interval DEFAULT NULL)
RETURNS SETOF hopper.leased_job AS 'MODULE_PATHNAME', 'hopper_queue_pull'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

CREATE FUNCTION hopper.queue_complete(id bigint, lease_token bigint, result jsonb DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME', 'hopper_queue_complete' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION hopper.queue_fail(
    id bigint,
    lease_token bigint,
    error text,
    retry_in interval DEFAULT NULL,
    permanent boolean DEFAULT false)
RETURNS text AS 'MODULE_PATHNAME', 'hopper_queue_fail' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION hopper.queue_heartbeat(id bigint, lease_token bigint, extend interval DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME', 'hopper_queue_heartbeat' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION hopper.queue_progress(id bigint, lease_token bigint, progress real, detail jsonb DEFAULT NULL)
RETURNS boolean AS 'MODULE_PATHNAME', 'hopper_queue_progress' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION hopper.queue_release(id bigint, lease_token bigint)
RETURNS boolean AS 'MODULE_PATHNAME', 'hopper_queue_release' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- ---------------------------------------------------------------------------------------------------
-- Operators
CREATE FUNCTION hopper.queue_cancel(id bigint)
RETURNS boolean AS 'MODULE_PATHNAME', 'hopper_queue_cancel' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION hopper.queue_retry(id bigint)
RETURNS boolean AS 'MODULE_PATHNAME', 'hopper_queue_retry' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION hopper.job_status(id bigint)
RETURNS hopper.job_info AS 'MODULE_PATHNAME', 'hopper_job_status' LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION hopper.queue_stats(queue text DEFAULT NULL)
RETURNS SETOF hopper.queue_stat AS 'MODULE_PATHNAME', 'hopper_queue_stats'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- ---------------------------------------------------------------------------------------------------
-- Privileges. Functions run as the caller (no SECURITY DEFINER), so the roles get exactly the table
-- rights their functions need; nothing is executable by PUBLIC.
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA hopper FROM PUBLIC;

GRANT EXECUTE ON FUNCTION
    hopper.queue_push(text, jsonb, timestamptz, integer, text, integer, text, text, interval),
    hopper.queue_push_batch(text, jsonb[], timestamptz, integer, text, integer, text[], text[],
                            interval),
    hopper.job_status(bigint),
    hopper.queue_stats(text)
TO hopper_producer;
-- A push makes its queue with the defaults: producers write the name and nothing else. The other
-- settings are the extension owner's (queue_create and the limit functions): a producer that
-- wrote them by hand could set a queue's limits or retention.
GRANT SELECT, INSERT (name) ON hopper.queues TO hopper_producer;
GRANT SELECT, INSERT ON hopper.jobs TO hopper_producer;
GRANT SELECT ON hopper.job_history TO hopper_producer;
GRANT USAGE ON SEQUENCE hopper.job_id_seq TO hopper_producer;

GRANT EXECUTE ON FUNCTION
    hopper.queue_pull(text, integer, interval, text, text[], timestamptz, boolean, interval),
    hopper.queue_complete(bigint, bigint, jsonb),
    hopper.queue_fail(bigint, bigint, text, interval, boolean),
    hopper.queue_heartbeat(bigint, bigint, interval),
    hopper.queue_progress(bigint, bigint, real, jsonb),
    hopper.queue_release(bigint, bigint),
    hopper.job_status(bigint),
    hopper.queue_stats(text)
TO hopper_worker;
GRANT SELECT ON hopper.queues TO hopper_worker;
GRANT SELECT, UPDATE, DELETE ON hopper.jobs TO hopper_worker;
GRANT SELECT, INSERT ON hopper.job_history TO hopper_worker;
GRANT USAGE ON SEQUENCE hopper.lease_token_seq TO hopper_worker;
-- A completion that matches no running job tells a lost lease from an unknown id; in a queue that
-- keeps no history (retention 0) a finished job is gone, and only the last id issued says it existed.
GRANT SELECT ON SEQUENCE hopper.job_id_seq TO hopper_producer, hopper_worker;

-- ---------------------------------------------------------------------------------------------------
-- Listing: the jobs of one queue (live and finished), optionally in one state, newest first.
CREATE FUNCTION hopper.queue_jobs(queue text, state text DEFAULT NULL, lim integer DEFAULT 100)
RETURNS SETOF hopper.job_info AS 'MODULE_PATHNAME', 'hopper_queue_jobs'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;
REVOKE ALL ON FUNCTION hopper.queue_jobs(text, text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION hopper.queue_jobs(text, text, integer) TO hopper_producer, hopper_worker;

-- ---------------------------------------------------------------------------------------------------
-- Reaper: a background worker per database that rescues stuck jobs (expired leases, session-bound
-- jobs whose backend is gone), prunes history and wakes workers. See README "The reaper".

-- Session-bound running jobs, which the reaper checks against the live backends every pass.
CREATE INDEX jobs_session_idx ON hopper.jobs (id) WHERE state = 'running' AND session_bound;
-- Jobs that wait for a time of their own (scheduled, or retried, rescued or released with a
-- backoff): the reaper wakes their queue's workers when that time comes, and asks every pass
-- which jobs' time came since its last look. By time first: a job stays here until it is
-- claimed, and a walk over the queues (with the queue first) cost every pass a descent for each
-- queue holding a job that fell due long ago. Jobs due when pushed (run_at = created_at) are
-- announced by the push and never enter it, so the common push pays no entry here.
CREATE INDEX jobs_delayed_idx ON hopper.jobs (run_at, queue)
    WHERE state = 'available' AND run_at > created_at;

-- Whether reaper_stop() parked this database's reaper (until reaper_start()). One row.
CREATE TABLE hopper.reaper_control (
    only_row   boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    stopped    boolean NOT NULL DEFAULT false,
    changed_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
INSERT INTO hopper.reaper_control DEFAULT VALUES;

-- One row per running reaper of the server: its pid, the database it serves, how it was started
-- (preload: by the launcher of a server with shared_preload_libraries = 'hopper'; dynamic: by
-- CREATE EXTENSION, reaper_start() or a push/pull that found none), when its last pass ended, and
-- how many jobs it rescued and history rows it pruned since it started.
CREATE FUNCTION hopper.reaper_status(
    OUT pid integer,
    OUT database text,
    OUT mode text,
    OUT last_run timestamptz,
    OUT jobs_rescued bigint,
    OUT jobs_pruned bigint)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'hopper_reaper_status'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 4;

-- Where this database's claims start (see README "Claims under a long-held snapshot"): one row per
-- queue that holds one of the server's slots; resumes = false means from the front.
CREATE FUNCTION hopper.claim_positions(
    OUT queue text,
    OUT resumes boolean,
    OUT priority smallint,
    OUT run_at timestamptz,
    OUT id bigint,
    OUT last_used timestamptz)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'hopper_claim_positions'
LANGUAGE C VOLATILE PARALLEL UNSAFE;
REVOKE ALL ON FUNCTION hopper.claim_positions() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION hopper.claim_positions() TO hopper_producer, hopper_worker;

-- Starts this database's reaper (and clears a reaper_stop()); false if one runs already.
CREATE FUNCTION hopper.reaper_start()
RETURNS boolean AS 'MODULE_PATHNAME', 'hopper_reaper_start' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Stops this database's reaper and keeps it stopped until reaper_start(); waits until it has
-- exited, so DROP DATABASE can follow. True if one was running.
CREATE FUNCTION hopper.reaper_stop()
RETURNS boolean AS 'MODULE_PATHNAME', 'hopper_reaper_stop' LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION hopper.reaper_status(), hopper.reaper_start(), hopper.reaper_stop()
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION hopper.reaper_status() TO hopper_producer, hopper_worker;
-- queue_push and queue_pull read the parked flag when they find no reaper running.
GRANT SELECT ON hopper.reaper_control TO hopper_producer, hopper_worker;

-- This database's reaper. Dynamic workers are not transactional: it waits for this transaction
-- to end before it looks for the extension.
SELECT hopper.reaper_start();

-- ---------------------------------------------------------------------------------------------------
-- Batched completion (fewer commits and round trips per job; see the README's Performance section).

-- Completes many held jobs in one statement and one commit. Returns the ids that were completed,
-- in the order given; a job whose lease was lost (stale token) is left out, as queue_complete
-- would answer false for it. results, when given, aligns with ids (NULL elements: no result).
CREATE FUNCTION hopper.queue_complete_many(
    ids bigint[],
    lease_tokens bigint[],
    results jsonb[] DEFAULT NULL)
RETURNS SETOF bigint AS 'MODULE_PATHNAME', 'hopper_queue_complete_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

-- Completes the held job (exactly as queue_complete) and pulls the next jobs (exactly as
-- queue_pull) in one call: one round trip and one commit per job for a worker pulling one at a
-- time. With id and lease_token both NULL it only pulls.
CREATE FUNCTION hopper.queue_complete_pull(
    id bigint,
    lease_token bigint,
    result jsonb,
    queue text,
    n integer DEFAULT 1,
    lease interval DEFAULT NULL,
    worker text DEFAULT NULL,
    kinds text[] DEFAULT NULL,
    at timestamptz DEFAULT NULL,
    session_bound boolean DEFAULT false)
RETURNS SETOF hopper.leased_job AS 'MODULE_PATHNAME', 'hopper_queue_complete_pull'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

-- Completes the held jobs (exactly as queue_complete_many) and pulls the next ones (exactly as
-- queue_pull) in one call: one round trip and one commit per batch for a worker pulling n at a
-- time. With empty arrays it only pulls.
CREATE FUNCTION hopper.queue_complete_many_pull(
    ids bigint[],
    lease_tokens bigint[],
    results jsonb[],
    queue text,
    n integer DEFAULT 1,
    lease interval DEFAULT NULL,
    worker text DEFAULT NULL,
    kinds text[] DEFAULT NULL,
    at timestamptz DEFAULT NULL,
    session_bound boolean DEFAULT false)
RETURNS SETOF hopper.leased_job AS 'MODULE_PATHNAME', 'hopper_queue_complete_many_pull'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

REVOKE ALL ON FUNCTION
    hopper.queue_complete_many(bigint[], bigint[], jsonb[]),
    hopper.queue_complete_pull(bigint, bigint, jsonb, text, integer, interval, text, text[],
                               timestamptz, boolean),
    hopper.queue_complete_many_pull(bigint[], bigint[], jsonb[], text, integer, interval, text,
                                    text[], timestamptz, boolean)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    hopper.queue_complete_many(bigint[], bigint[], jsonb[]),
    hopper.queue_complete_pull(bigint, bigint, jsonb, text, integer, interval, text, text[],
                               timestamptz, boolean),
    hopper.queue_complete_many_pull(bigint[], bigint[], jsonb[], text, integer, interval, text,
                                    text[], timestamptz, boolean)
TO hopper_worker;

-- ---------------------------------------------------------------------------------------------------
-- Concurrency limits and rate limits (see the README's "Concurrency limits" and "Rate limits").
-- A queue with any limit is "limited": its pulls are serialized by a transaction advisory lock on
-- the queue and count running jobs from the live rows, so no race can exceed a limit and every way
-- a job stops running (complete, fail, release, cancel, rescue) frees its slot with no counter to
-- drift. Queues without limits keep the unserialized claim.
ALTER TABLE hopper.queues
    ADD COLUMN max_running     integer CHECK (max_running BETWEEN 1 AND 1000000),
    ADD COLUMN key_max_running integer CHECK (key_max_running BETWEEN 1 AND 1000000),
    -- The rate limit every key gets unless it has its own: at most key_max_claims per key_claims_per.
    ADD COLUMN key_max_claims  integer CHECK (key_max_claims BETWEEN 1 AND 1000000),
    -- At most queue_set_rate_limit's 31 days. Only the limit functions write these, but the
    -- checks keep a row written by any other way from failing every pull of the queue with a raw
    -- 23502 (a rate without a period) or 22012 (a period of 0).
    ADD COLUMN key_claims_per  interval
               CHECK (key_claims_per > interval '0' AND key_claims_per <= interval '744 hours'),
    -- Kept by the limit functions: whether the queue has any limit at all, so that queue_pull's
    -- unlimited claim can leave limited queues to the serialized one by reading this row only;
    -- and whether it has rate limits, whose claims spend tokens and so keep the queue's lock to
    -- the end of the transaction.
    ADD COLUMN limited         boolean NOT NULL DEFAULT false,
    ADD COLUMN rated           boolean NOT NULL DEFAULT false,
    -- A fixed length, as the other durations (see hopper.queues).
    ADD CONSTRAINT queues_key_claims_per_fixed CHECK (
        EXTRACT(day FROM key_claims_per) = 0 AND EXTRACT(month FROM key_claims_per) = 0
        AND EXTRACT(year FROM key_claims_per) = 0),
    ADD CONSTRAINT queues_key_rate_pair CHECK ((key_max_claims IS NULL) = (key_claims_per IS NULL));

-- Per-key overrides of the queue's key_max_running.
CREATE TABLE hopper.queue_key_limits (
    queue           text NOT NULL REFERENCES hopper.queues (name) ON DELETE CASCADE,
    concurrency_key text NOT NULL,
    max_running     integer NOT NULL CHECK (max_running BETWEEN 1 AND 1000000),
    PRIMARY KEY (queue, concurrency_key)
);

-- Token buckets: at most max_claims claims per period, for a whole queue (concurrency_key NULL) or
-- one key of it. tokens is the bucket's content at refilled_at; a pull refills it by the time
-- elapsed (its `at` is the clock) and spends one token per claim. from_default: a key's bucket of
-- the queue's per-key default (key_max_claims), made by the first claim of that key; a key with
-- no bucket yet has a full one.
CREATE TABLE hopper.rate_limits (
    queue           text NOT NULL REFERENCES hopper.queues (name) ON DELETE CASCADE,
    concurrency_key text,
    max_claims      integer NOT NULL CHECK (max_claims BETWEEN 1 AND 1000000),
    -- Stored as a fixed length (see hopper.queues), and read only as seconds. No check: every
    -- rate-limited claim updates its buckets, and would pay for it.
    period          interval NOT NULL,
    tokens          double precision NOT NULL,
    refilled_at     timestamptz NOT NULL,
    from_default    boolean NOT NULL DEFAULT false,
    -- The queue's own bucket ('q') or a key's ('k:' || key): never NULL, so that it can be in the
    -- primary key, which is the replica identity a publication needs for the updates every
    -- rate-limited claim makes. Written by the inserts, not generated: logical replication does
    -- not send generated columns, and a subscriber could not find the rows by it.
    bucket          text NOT NULL CHECK (bucket = COALESCE('k:' || concurrency_key, 'q')),
    PRIMARY KEY (queue, bucket)
);

-- The waiting jobs of a queue by key, in pull order within each key: the serialized claim walks the
-- distinct keys with it (a skip scan) and takes each key's first jobs, so a key with a long
-- backlog and no free slot costs one index descent, not a scan of its backlog. Unkeyed jobs have
-- an index of their own, so that they are found without walking past the keyed ones. Each push
-- adds an entry to one of the two.
CREATE INDEX jobs_key_pull_idx ON hopper.jobs (queue, concurrency_key, priority, run_at, id)
    WITH (deduplicate_items = off) WHERE state = 'available' AND concurrency_key IS NOT NULL;
CREATE INDEX jobs_unkeyed_pull_idx ON hopper.jobs (queue, priority, run_at, id)
    WITH (deduplicate_items = off) WHERE state = 'available' AND concurrency_key IS NULL;

SELECT pg_catalog.pg_extension_config_dump('hopper.queue_key_limits', '');
SELECT pg_catalog.pg_extension_config_dump('hopper.rate_limits', '');

-- The queue-wide cap on running jobs and the default limit of running jobs per concurrency key;
-- NULL: no limit.
CREATE FUNCTION hopper.queue_set_concurrency(queue text, max_running integer, key_max_running integer)
RETURNS void AS 'MODULE_PATHNAME', 'hopper_queue_set_concurrency' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- A limit for one concurrency key, overriding the queue's key_max_running; NULL removes it.
CREATE FUNCTION hopper.queue_set_key_limit(queue text, concurrency_key text, max_running integer)
RETURNS void AS 'MODULE_PATHNAME', 'hopper_queue_set_key_limit' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- At most max_claims claims per `per`: for the whole queue, for one key (concurrency_key given), or
-- for every key that has no limit of its own (each_key); max_claims NULL removes it. Setting a
-- bucket fills it.
CREATE FUNCTION hopper.queue_set_rate_limit(
    queue text,
    max_claims integer,
    per interval,
    concurrency_key text DEFAULT NULL,
    each_key boolean DEFAULT false)
RETURNS void AS 'MODULE_PATHNAME', 'hopper_queue_set_rate_limit' LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- What is configured, with running counts and bucket contents now: a 'queue' row (the cap, all
-- running jobs, the queue's bucket), a 'key default' row (key_max_running and the per-key rate)
-- and a 'key' row for every key with an override, a bucket or running jobs (its effective limits).
CREATE FUNCTION hopper.queue_limits(
    queue text,
    OUT scope text,
    OUT concurrency_key text,
    OUT max_running integer,
    OUT running bigint,
    OUT max_claims integer,
    OUT per interval,
    OUT tokens double precision)
RETURNS SETOF record AS 'MODULE_PATHNAME', 'hopper_queue_limits'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

REVOKE ALL ON FUNCTION
    hopper.queue_set_concurrency(text, integer, integer),
    hopper.queue_set_key_limit(text, text, integer),
    hopper.queue_set_rate_limit(text, integer, interval, text, boolean),
    hopper.queue_limits(text)
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION hopper.queue_limits(text) TO hopper_producer, hopper_worker;
GRANT SELECT ON hopper.queue_key_limits, hopper.rate_limits TO hopper_producer, hopper_worker;
-- Pulls spend tokens and make the buckets of keys under the per-key default, but no role that may
-- pull writes hopper.rate_limits: the claim writes its buckets with the rights of the table's
-- owner (extension/src/limited_claim.cpp), so that a worker cannot empty, freeze or lift a
-- queue's rate for every other worker by writing a bucket by hand.

-- ---------------------------------------------------------------------------------------------------
-- Dedup windows: a push with dedup_key and dedup_window also returns a job with that key that
-- finished after being created within the window. This index finds it in history.
CREATE INDEX job_history_dedup_idx ON hopper.job_history (queue, dedup_key, created_at)
    WHERE dedup_key IS NOT NULL;
-- A windowed push that raced the original's move to history deletes its own just-inserted row.
GRANT DELETE ON hopper.jobs TO hopper_producer;

-- ---------------------------------------------------------------------------------------------------
-- Periodic jobs: schedules in cron syntax (UTC) that the reaper turns into jobs, one per tick. See
-- README "Periodic jobs".
CREATE TABLE hopper.schedules (
    name         text PRIMARY KEY CHECK (pg_catalog.octet_length(name) BETWEEN 1 AND 128),
    cron         text NOT NULL,
    -- Dropping a queue drops its schedules: they would only recreate it.
    queue        text NOT NULL REFERENCES hopper.queues (name) ON DELETE CASCADE,
    payload      jsonb NOT NULL DEFAULT '{}',
    kind         text,
    priority     smallint NOT NULL DEFAULT 0,
    max_attempts integer CHECK (max_attempts BETWEEN 1 AND 1000),
    next_run_at  timestamptz NOT NULL,
    last_run_at  timestamptz,
    last_job_id  bigint,
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at   timestamptz,
    -- The role whose rights the schedule's push runs with, whoever runs it (the reaper is a
    -- superuser): the role that wrote the schedule. The role itself, not its name: a renamed
    -- role keeps its schedules, and a role made again under a dropped one's name does not get
    -- them. regrole, not oid: pg_dump writes the name, and a restore into another server maps
    -- it to that server's role. NULL once a run found the role dropped (DROP ROLE cannot see
    -- rows): such a schedule does not run until a superuser gives it to a role.
    owner        pg_catalog.regrole
                 DEFAULT pg_catalog.quote_ident(CURRENT_USER)::pg_catalog.regrole
);
CREATE INDEX schedules_due_idx ON hopper.schedules (next_run_at);
CREATE INDEX schedules_queue_idx ON hopper.schedules (queue);
SELECT pg_catalog.pg_extension_config_dump('hopper.schedules', '');

-- The next time strictly after `after` that a cron expression matches (UTC).
CREATE FUNCTION hopper.cron_next(expression text, after timestamptz DEFAULT pg_catalog.now())
RETURNS timestamptz AS 'MODULE_PATHNAME', 'hopper_cron_next'
LANGUAGE C STABLE PARALLEL SAFE;

-- Creates or replaces a schedule; returns its next run time.
CREATE FUNCTION hopper.queue_schedule(
    name text,
    cron text,
    queue text,
    payload jsonb DEFAULT '{}',
    kind text DEFAULT NULL,
    priority integer DEFAULT 0,
    max_attempts integer DEFAULT NULL)
RETURNS timestamptz AS 'MODULE_PATHNAME', 'hopper_queue_schedule'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Removes a schedule; false if there was none. Jobs it already pushed stay.
CREATE FUNCTION hopper.queue_unschedule(name text)
RETURNS boolean AS 'MODULE_PATHNAME', 'hopper_queue_unschedule'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Pushes the job of every schedule due at `at` (default now) and returns how many jobs it pushed.
-- The reaper calls it every pass; `at` lets tests travel in time.
CREATE FUNCTION hopper.schedule_run_due(at timestamptz DEFAULT NULL)
RETURNS integer AS 'MODULE_PATHNAME', 'hopper_schedule_run_due'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- The schedules, soonest first.
CREATE FUNCTION hopper.queue_schedules(
    OUT name text,
    OUT cron text,
    OUT queue text,
    OUT kind text,
    OUT priority smallint,
    OUT max_attempts integer,
    OUT payload jsonb,
    OUT next_run_at timestamptz,
    OUT last_run_at timestamptz,
    OUT last_job_id bigint,
    OUT created_at timestamptz,
    OUT owner name)
RETURNS SETOF record
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
    -- The owner's name as it is now, unquoted; NULL for a schedule whose role was dropped (and
    -- "unknown (OID=n)" until a run has found it dropped).
    SELECT s.name, s.cron, s.queue, s.kind, s.priority, s.max_attempts, s.payload, s.next_run_at,
           s.last_run_at, s.last_job_id, s.created_at, pg_catalog.pg_get_userbyid(s.owner)
    FROM hopper.schedules s ORDER BY s.next_run_at, s.name
$fn$;

-- Schedules push jobs, so producers manage them. Workers get no access: schedule payloads are the
-- producers' business until a job carries one. cron_next is a pure preview, for both.
REVOKE ALL ON FUNCTION
    hopper.cron_next(text, timestamptz),
    hopper.queue_schedule(text, text, text, jsonb, text, integer, integer),
    hopper.queue_unschedule(text),
    hopper.schedule_run_due(timestamptz),
    hopper.queue_schedules()
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION
    hopper.queue_schedule(text, text, text, jsonb, text, integer, integer),
    hopper.queue_unschedule(text),
    hopper.schedule_run_due(timestamptz),
    hopper.queue_schedules()
TO hopper_producer;
GRANT EXECUTE ON FUNCTION hopper.cron_next(text, timestamptz) TO hopper_producer, hopper_worker;
-- Every column but owner: a producer's schedule runs with its own rights, so it may not name
-- another role. (Its default, CURRENT_USER, fills it in.)
GRANT SELECT, DELETE ON hopper.schedules TO hopper_producer;
GRANT INSERT (name, cron, queue, payload, kind, priority, max_attempts, next_run_at, last_run_at,
              last_job_id, created_at, updated_at),
      UPDATE (name, cron, queue, payload, kind, priority, max_attempts, next_run_at, last_run_at,
              last_job_id, created_at, updated_at)
ON hopper.schedules TO hopper_producer;
-- A role that changes what a schedule pushes (queue_schedule replacing it, or an UPDATE by hand)
-- becomes its owner: the schedule of another role must not push, with that role's rights, a job
-- that role did not define. A run moving next_run_at, or an owner set by a superuser, keeps it.
-- A schedule without an owner (its role dropped) is taken over the same way.
CREATE FUNCTION hopper.schedules_owner() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF NEW.owner IS NOT DISTINCT FROM OLD.owner
       AND (NEW.cron, NEW.queue, NEW.payload, NEW.kind, NEW.priority, NEW.max_attempts)
           IS DISTINCT FROM (OLD.cron, OLD.queue, OLD.payload, OLD.kind, OLD.priority,
                             OLD.max_attempts) THEN
        NEW.owner := quote_ident(CURRENT_USER)::regrole;
    END IF;
    RETURN NEW;
END
$fn$;
REVOKE ALL ON FUNCTION hopper.schedules_owner() FROM PUBLIC;
CREATE TRIGGER schedules_owner BEFORE UPDATE ON hopper.schedules
    FOR EACH ROW EXECUTE FUNCTION hopper.schedules_owner();
-- Producers may write schedules by hand: a row the reaper could not run (a cron expression it
-- cannot read, a payload a push refuses) failed its batch of due schedules on every pass, and
-- with it every schedule of the database. Such rows are refused as queue_schedule refuses them.
ALTER TABLE hopper.schedules
    ADD CONSTRAINT schedules_cron_check
        CHECK (hopper.cron_next(cron, timestamptz '2000-01-01 00:00:00+00') IS NOT NULL),
    ADD CONSTRAINT schedules_payload_check CHECK (pg_catalog.jsonb_typeof(payload) = 'object'),
    ADD CONSTRAINT schedules_kind_check
        CHECK (kind IS NULL OR pg_catalog.octet_length(kind) BETWEEN 1 AND 128);

-- ---------------------------------------------------------------------------------------------------
-- Completion notifications. "hopper:done" is opt-in per queue: a NOTIFY makes its transaction take
-- a database-wide lock across its commit's WAL flush, so every notifying commit of the database is
-- serialized. Workers of queues nobody waits on should not pay that on every completion.
ALTER TABLE hopper.queues ADD COLUMN notify_done boolean NOT NULL DEFAULT false;

-- Turns "hopper:done" on or off for one queue (off by default). Returns the previous setting.
CREATE FUNCTION hopper.queue_set_notify_done(queue text, enabled boolean)
RETURNS boolean AS 'MODULE_PATHNAME', 'hopper_queue_set_notify_done'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Queue administration: the extension owner's, like queue_create.
REVOKE ALL ON FUNCTION hopper.queue_set_notify_done(text, boolean) FROM PUBLIC;

-- ---------------------------------------------------------------------------------------------------
-- Jobs finished in the caller's transaction (README "Taking jobs in your transaction"): the first n
-- due jobs, in pull order, are locked, removed and recorded as completed; they are done when the
-- transaction commits and untouched if it rolls back. No lease, no token.
CREATE TYPE hopper.taken_job AS (
    id          bigint,
    queue       text,
    kind        text,
    payload     jsonb,
    attempt     integer,
    run_at      timestamptz,
    created_at  timestamptz
);

CREATE FUNCTION hopper.queue_take(
    queue text,
    n integer DEFAULT 1,
    worker text DEFAULT NULL,
    kinds text[] DEFAULT NULL,
    at timestamptz DEFAULT NULL,
    wait interval DEFAULT NULL)
RETURNS SETOF hopper.taken_job AS 'MODULE_PATHNAME', 'hopper_queue_take'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 10;

REVOKE ALL ON FUNCTION hopper.queue_take(text, integer, text, text[], timestamptz, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION hopper.queue_take(text, integer, text, text[], timestamptz, interval)
TO hopper_worker;

-- The failed attempt of a taken job (README "Taking jobs in your transaction"): counted, with its
-- error, and the job retried with backoff or buried, as queue_fail does for a leased job. Called in
-- the taking transaction after rolling back to a savepoint made after the take, it puts the job
-- back first, so it never leaves the taker's hands. Returns the new state, or NULL when the job is
-- no longer available (another taker finished it meanwhile).
CREATE FUNCTION hopper.queue_fail_taken(
    id bigint,
    error text,
    retry_in interval DEFAULT NULL,
    permanent boolean DEFAULT false,
    worker text DEFAULT NULL)
RETURNS text AS 'MODULE_PATHNAME', 'hopper_queue_fail_taken' LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE ALL ON FUNCTION hopper.queue_fail_taken(bigint, text, interval, boolean, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION hopper.queue_fail_taken(bigint, text, interval, boolean, text)
TO hopper_worker;
-- Failing a job in the transaction that took it puts the job back first: its row into hopper.jobs,
-- and the take's history row out.
GRANT INSERT ON hopper.jobs TO hopper_worker;
GRANT DELETE ON hopper.job_history TO hopper_worker;

-- Packed batches (README "Packed batches"): a queue_push_batch of due jobs without keys stores its
-- jobs in rows of up to 100, ids and payloads side by side in arrays, instead of a row each. A
-- pull takes jobs from the front of a row (raising `taken`, an update that touches no indexed
-- column) and inserts them into hopper.jobs as running; a take moves them straight to history.
-- Per job that writes no heap row and no index entry at the push, and one row at the claim where a
-- row per job costs a row at the push and a new version at the claim. Anything that acts on one
-- waiting job by id (queue_cancel), or on a queue with limits, first unpacks its row into
-- ordinary rows of hopper.jobs.
CREATE TABLE hopper.job_batches (
    first_id     bigint PRIMARY KEY,   -- ids[1]: the row's place in pull order
    last_id      bigint NOT NULL,      -- ids[cardinality(ids)]: bounds the lookup of one id
    queue        text NOT NULL,
    priority     smallint NOT NULL,
    run_at       timestamptz NOT NULL,
    created_at   timestamptz NOT NULL,
    kind         text,
    max_attempts integer NOT NULL,
    -- Jobs gone from the front: 0 <= taken < cardinality(ids), since a claim deletes the row it
    -- empties. The claims and the push keep that and the arrays' alignment; CHECK constraints
    -- would be parsed again by every statement that writes a row, the claims included.
    taken        integer NOT NULL DEFAULT 0,
    ids          bigint[] NOT NULL,    -- ascending
    payloads     jsonb[] NOT NULL      -- aligned with ids
) WITH (fillfactor = 80);
CREATE INDEX job_batches_pull_idx ON hopper.job_batches (queue, priority, run_at, first_id);
-- queue_jobs finds a queue's newest waiting jobs in its rows of highest last_id: a row holds no
-- job above its last_id, whereas its first_id bounds nothing (the ids of batches pushed at the
-- same time interleave, so a row with a low first_id can hold the newest job). Reading every row
-- of the queue instead took 240-440 ms per listing of a backlog of 500,000 jobs. first_id breaks
-- ties, so the walk does not depend on last_id being unique. One more entry per 100 jobs at the
-- push; a claim's update of `taken` leaves it alone.
CREATE INDEX job_batches_list_idx ON hopper.job_batches (queue, last_id, first_id);
SELECT pg_catalog.pg_extension_config_dump('hopper.job_batches', '');
-- A row of 100 small jobs is past the 2 kB at which PostgreSQL compresses a row, and compressing
-- it was a seventh of a packed push's CPU. The ids (ascending bigints, which pglz never shrinks by
-- the quarter it asks for: every push tried and gave up) are not compressed at all, and the
-- payloads use lz4 where the server was built with it: 5% more packed pushes per second, the
-- claims unchanged (bench/ANALYSIS.md, section 20).
ALTER TABLE hopper.job_batches ALTER COLUMN ids SET STORAGE EXTERNAL;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_settings
               WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE hopper.job_batches ALTER COLUMN payloads SET COMPRESSION lz4;
    END IF;
END
$$;
-- Set by a queue's first packed push, in its transaction, and cleared by the reaper once the queue
-- has no packed row left: claims on a queue without it read hopper.jobs alone, so queues that have
-- no packed jobs pay nothing for them. (include/hopper/batches.hpp, kMarkLockKey1, says how a
-- clear never races a push.)
ALTER TABLE hopper.queues ADD COLUMN packed boolean NOT NULL DEFAULT false;
-- The reaper looks at every pass for marked queues whose packed rows are all gone: through this
-- index it reads the few marked queues, not every queue's row.
CREATE INDEX queues_packed_idx ON hopper.queues (name) WHERE packed;
GRANT UPDATE (packed) ON hopper.queues TO hopper_producer;
GRANT SELECT, INSERT ON hopper.job_batches TO hopper_producer;
GRANT SELECT, INSERT, UPDATE, DELETE ON hopper.job_batches TO hopper_worker;

-- Each backend remembers the queues it pushed to (their max_attempts), so that a push inserts its
-- job without reading hopper.queues, and what its claims and completions read of a queue's row
-- (paused, limited, packed, notify_done, retention, lease). Any change to the table (a queue
-- created, dropped or changed, or created by a transaction that rolls back) sends a relcache
-- invalidation of it, which makes every backend forget.
-- A statement that changed no row sends none: the reaper's look for unmarked packed queues (an
-- UPDATE, every pass, that nearly always matches nothing) made every backend forget, and read
-- hopper.queues and its layout again, about once a second. Hence a trigger per event, each with
-- the rows it changed (PostgreSQL allows a transition table on a trigger of one event only): the
-- rows are copied as they change, one small copy per changed row, and changes to hopper.queues
-- are rare and few rows each (a queue created, paused, marked packed).
CREATE FUNCTION hopper.queues_changed() RETURNS trigger
AS 'MODULE_PATHNAME', 'hopper_queues_changed' LANGUAGE C;
REVOKE ALL ON FUNCTION hopper.queues_changed() FROM PUBLIC;
CREATE TRIGGER queues_inserted
    AFTER INSERT ON hopper.queues REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION hopper.queues_changed();
CREATE TRIGGER queues_updated
    AFTER UPDATE ON hopper.queues REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION hopper.queues_changed();
CREATE TRIGGER queues_deleted
    AFTER DELETE ON hopper.queues REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION hopper.queues_changed();
CREATE TRIGGER queues_truncated
    AFTER TRUNCATE ON hopper.queues
    FOR EACH STATEMENT EXECUTE FUNCTION hopper.queues_changed();
-- The same for changes made with session_replication_role = replica, which skips the triggers above:
-- a subscription's apply worker (a queue moved by logical replication, README "Replication") and
-- sessions that set it themselves. Apply fires row triggers only (TRUNCATE excepted); changes to
-- hopper.queues are rare, so a row trigger costs nothing that matters.
CREATE TRIGGER queues_changed_replica
    AFTER INSERT OR UPDATE OR DELETE ON hopper.queues
    FOR EACH ROW EXECUTE FUNCTION hopper.queues_changed();
CREATE TRIGGER queues_truncated_replica
    AFTER TRUNCATE ON hopper.queues
    FOR EACH STATEMENT EXECUTE FUNCTION hopper.queues_changed();
ALTER TABLE hopper.queues ENABLE REPLICA TRIGGER queues_changed_replica;
ALTER TABLE hopper.queues ENABLE REPLICA TRIGGER queues_truncated_replica;
