-- hopper worker, one commit per batch: complete the :n jobs held since the previous transaction
-- (queue_complete_many) and pull the next :n, in one transaction.
-- With stop_when_empty = 1 (drain runs) a client that finds the queue empty ends itself with a
-- deliberate error, pgbench's only way to stop one client; otherwise it sleeps :idle microseconds.
BEGIN;
SELECT pg_catalog.count(*) FROM hopper.queue_complete_many(:ids::bigint[], :toks::bigint[]);
SELECT COALESCE(pg_catalog.array_agg(id)::text, '{}') AS ids,
       COALESCE(pg_catalog.array_agg(lease_token)::text, '{}') AS toks, pg_catalog.count(*) AS got
FROM hopper.queue_pull(:q, :n) \gset
COMMIT;
\if :got = 0
\if :stop_when_empty
SELECT 'the queue is empty: this client is done'::integer;
\endif
\sleep :idle us
\endif
