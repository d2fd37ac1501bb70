-- pgbench limit: UPDATE one row by primary key (10k rows).
\set k random(1, 10000)
UPDATE bench.raw_update SET v = v + 1 WHERE id = :k;
