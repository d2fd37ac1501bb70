-- hopper: push :batch jobs in one call (payloads built server-side, as for the baseline).
SELECT pg_catalog.count(*) FROM hopper.queue_push_batch(:q,
    ARRAY(SELECT pg_catalog.jsonb_build_object('n', g) FROM pg_catalog.generate_series(1, :batch) g));
