-- hopper worker, existing API: pull 1 (one transaction), then queue_complete (a second one).
-- With stop_when_empty = 1 (drain runs) a client that finds the queue empty ends itself with a
-- deliberate error, pgbench's only way to stop one client; otherwise it sleeps :idle microseconds.
SELECT COALESCE(max(id), 0) AS id, COALESCE(max(lease_token), 0) AS tok
FROM hopper.queue_pull(:q, 1) \gset
\if :id > 0
SELECT hopper.queue_complete(:id, :tok);
\else
\if :stop_when_empty
SELECT 'the queue is empty: this client is done'::integer;
\endif
\sleep :idle us
\endif
