-- pgbench limit: one single-row INSERT per transaction (bigserial key, timestamp, small jsonb).
INSERT INTO bench.raw_insert (payload) VALUES ('{"n": 1}');
