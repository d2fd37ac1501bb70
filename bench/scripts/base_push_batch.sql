-- Baseline queue: push :batch jobs in one INSERT (payloads built server-side, as for hopper).
INSERT INTO bench.baseline_queue (message)
SELECT pg_catalog.jsonb_build_object('n', g) FROM pg_catalog.generate_series(1, :batch) g;
