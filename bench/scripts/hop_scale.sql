-- hopper at a constant backlog: one transaction completes the :n jobs held since the previous one,
-- pushes :n new jobs (to the end of the queue) and pulls the next :n from the front.
BEGIN;
SELECT pg_catalog.count(*) FROM hopper.queue_complete_many(:ids::bigint[], :toks::bigint[]);
SELECT pg_catalog.count(*) FROM hopper.queue_push_batch(:q,
    ARRAY(SELECT pg_catalog.jsonb_build_object('n', g) FROM pg_catalog.generate_series(1, :n) g));
SELECT COALESCE(pg_catalog.array_agg(id)::text, '{}') AS ids,
       COALESCE(pg_catalog.array_agg(lease_token)::text, '{}') AS toks
FROM hopper.queue_pull(:q, :n) \gset
COMMIT;
