-- hopper worker, one round trip and one commit per job: queue_complete_pull completes the job this
-- client held since its previous transaction and pulls the next one.
-- With stop_when_empty = 1 (drain runs) a client that finds the queue empty ends itself with a
-- deliberate error, pgbench's only way to stop one client; otherwise it sleeps :idle microseconds.
SELECT COALESCE(max(id), 0) AS id, COALESCE(max(lease_token), 0) AS tok
FROM hopper.queue_complete_pull(NULLIF(:id::bigint, 0), NULLIF(:tok::bigint, 0), NULL, :q, 1) \gset
\if :id = 0
\if :stop_when_empty
SELECT 'the queue is empty: this client is done'::integer;
\endif
\sleep :idle us
\endif
