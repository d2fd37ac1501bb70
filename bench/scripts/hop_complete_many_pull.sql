-- hopper worker, one round trip and one commit per batch: queue_complete_many_pull completes the
-- :n jobs held since the previous call and pulls the next :n.
-- With stop_when_empty = 1 (drain runs) a client that finds the queue empty ends itself with a
-- deliberate error, pgbench's only way to stop one client; otherwise it sleeps :idle microseconds.
SELECT COALESCE(pg_catalog.array_agg(id)::text, '{}') AS ids,
       COALESCE(pg_catalog.array_agg(lease_token)::text, '{}') AS toks, pg_catalog.count(*) AS got
FROM hopper.queue_complete_many_pull(:ids::bigint[], :toks::bigint[], NULL, :q, :n) \gset
\if :got = 0
\if :stop_when_empty
SELECT 'the queue is empty: this client is done'::integer;
\endif
\sleep :idle us
\endif
