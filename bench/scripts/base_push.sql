-- Baseline queue: push one job.
INSERT INTO bench.baseline_queue (message) VALUES ('{"n": 1}');
