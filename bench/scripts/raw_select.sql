-- pgbench limit: the round trip.
SELECT 1;
