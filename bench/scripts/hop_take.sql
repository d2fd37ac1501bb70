-- hopper worker in one transaction per batch: queue_take locks the next :n jobs and completes them
-- when the transaction commits (the work would run in between). One round trip and one commit
-- per batch, and no claim UPDATE.
-- With stop_when_empty = 1 (drain runs) a client that finds the queue empty ends itself with a
-- deliberate error, pgbench's only way to stop one client; otherwise it sleeps :idle microseconds.
SELECT pg_catalog.count(*) AS got FROM hopper.queue_take(:q, :n) \gset
\if :got = 0
\if :stop_when_empty
SELECT 'the queue is empty: this client is done'::integer;
\endif
\sleep :idle us
\endif
