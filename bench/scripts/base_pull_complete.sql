-- Baseline queue worker: pull up to :n (one transaction), then complete them = DELETE (a second
-- transaction). An empty pull sleeps :idle microseconds, like a polling worker.
-- With stop_when_empty = 1 (drain runs) a client that finds the queue empty ends itself with a
-- deliberate error, pgbench's only way to stop one client; otherwise it sleeps :idle microseconds.
-- bench/run.sh writes :n into the LIMIT as a literal before pgbench reads the script: bound as a
-- parameter, it left the baseline on a generic plan that scans the whole queue for every pull.
WITH claimed AS (
    UPDATE bench.baseline_queue SET status = 'running', updated_at = pg_catalog.now()
    WHERE id IN (SELECT id FROM bench.baseline_queue
                 WHERE status = 'new' AND scheduled_for <= pg_catalog.now()
                 ORDER BY scheduled_for FOR UPDATE SKIP LOCKED LIMIT :n)
    RETURNING *)
SELECT COALESCE(pg_catalog.array_agg(id)::text, '{}') AS ids, pg_catalog.count(*) AS got FROM claimed
\gset
\if :got > 0
DELETE FROM bench.baseline_queue WHERE id = ANY (:ids::bigint[]);
\else
\if :stop_when_empty
SELECT 'the queue is empty: this client is done'::integer;
\endif
\sleep :idle us
\endif
