-- The bench database: hopper, the raw pgbench tables and the plain-SQL baseline queue.
CREATE EXTENSION IF NOT EXISTS hopper;
CREATE SCHEMA IF NOT EXISTS bench;

CREATE TABLE bench.raw_insert (
    id         bigserial PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now(),
    payload    jsonb NOT NULL
);
CREATE TABLE bench.raw_update (id integer PRIMARY KEY, v bigint NOT NULL DEFAULT 0);
INSERT INTO bench.raw_update (id) SELECT g FROM generate_series(1, 10000) g;

-- The plain-SQL queue of the well-known tutorial: the job row is the state machine.
-- push = INSERT; pull = UPDATE ... WHERE id IN (SELECT ... ORDER BY scheduled_for FOR UPDATE SKIP
-- LOCKED LIMIT n) RETURNING *; complete = DELETE. Its claim scan gets the best index it can use.
CREATE TABLE bench.baseline_queue (
    id              bigserial PRIMARY KEY,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    scheduled_for   timestamptz NOT NULL DEFAULT now(),
    failed_attempts integer NOT NULL DEFAULT 0,
    status          text NOT NULL DEFAULT 'new',
    message         jsonb NOT NULL
);
CREATE INDEX baseline_queue_pull_idx ON bench.baseline_queue (scheduled_for) WHERE status = 'new';

SELECT hopper.queue_create(q) FROM unnest(ARRAY['enq', 'drain', 'steady', 'lat', 'scale', 'churn',
                                                'pressure', 'slots']) q;
