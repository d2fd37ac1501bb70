// The four queues of the peers bench behind one small interface, so that run.js drives them all the
// same way: the plain-SQL baseline queue, hopper through its SQL functions, pg-boss and Graphile
// Worker through their own Node.js APIs (what their users call).
//
//   setup()                  once per run: schema, queue, connection pools
//   reset()                  before each measurement: no jobs left anywhere, a CHECKPOINT
//   preload(n)               n waiting jobs, written the fastest way the system offers
//   producer() -> push()     one job per round trip
//   consumer(batch) -> step()   one claim of up to `batch` jobs and their completion;
//                               returns { completed, claimed }
//   runner(batch, onDone)    (Graphile Worker only) its own worker pool in place of step()
//   unfinished()             jobs neither completed nor deleted (waiting or running)
//   close()
//
// Connections come from the PG* environment (bench/peers.sh sets it).
'use strict';

const { Client, Pool } = require('pg');

const QUEUE = 'peers';
const PAYLOAD = { n: 1 };
const CONSUMERS = 4;

async function connect() {
  const c = new Client();
  await c.connect();
  return c;
}

// A session for set-up and resets, where the preloads need not wait for the disk.
async function adminSession() {
  const c = await connect();
  await c.query('SET synchronous_commit = off');
  return c;
}

async function count(client, sql, params = []) {
  return Number((await client.query(sql, params)).rows[0].count);
}

// n rows in chunks of 1000, each chunk one statement built by `chunk(count)`.
async function inChunks(n, chunk) {
  for (let done = 0; done < n; done += 1000) await chunk(Math.min(1000, n - done));
}

function baseline() {
  let admin;
  // The tutorial's claim, with the batch size written into the text as its users write it (a bound
  // LIMIT leaves PostgreSQL on a generic plan that reads the whole table; bench/ANALYSIS.md, 22).
  const claimSql = (batch) => `
    WITH claimed AS (
      UPDATE bench.baseline_queue SET status = 'running', updated_at = pg_catalog.now()
      WHERE id IN (SELECT id FROM bench.baseline_queue
                   WHERE status = 'new' AND scheduled_for <= pg_catalog.now()
                   ORDER BY scheduled_for FOR UPDATE SKIP LOCKED LIMIT ${Number(batch)})
      RETURNING id)
    SELECT pg_catalog.array_agg(id) AS ids FROM claimed`;
  return {
    name: 'baseline (plain SQL)',
    async setup() {
      admin = await adminSession();
    },
    async reset() {
      await admin.query('TRUNCATE bench.baseline_queue');
      await admin.query('CHECKPOINT');
    },
    async preload(n) {
      await inChunks(n, (k) =>
        admin.query(
          `INSERT INTO bench.baseline_queue (message)
           SELECT pg_catalog.jsonb_build_object('n', g) FROM pg_catalog.generate_series(1, $1) g`,
          [k]));
      await admin.query('VACUUM ANALYZE bench.baseline_queue');
    },
    unfinished: () => count(admin, 'SELECT pg_catalog.count(*) FROM bench.baseline_queue'),
    async producer() {
      const c = await connect();
      return {
        push: () => c.query('INSERT INTO bench.baseline_queue (message) VALUES ($1)', [PAYLOAD]),
        close: () => c.end(),
      };
    },
    async consumer(batch) {
      const c = await connect();
      const sql = claimSql(batch);
      return {
        async step() {
          const ids = (await c.query(sql)).rows[0].ids;
          if (!ids) return { completed: 0, claimed: 0 };
          await c.query('DELETE FROM bench.baseline_queue WHERE id = ANY ($1::bigint[])', [ids]);
          return { completed: ids.length, claimed: ids.length };
        },
        close: () => c.end(),
      };
    },
    close: () => admin.end(),
  };
}

function hopper() {
  let admin;
  return {
    name: 'hopper',
    async setup() {
      admin = await adminSession();
      await admin.query('SELECT hopper.queue_create($1)', [QUEUE]);
    },
    async reset() {
      await admin.query('TRUNCATE hopper.jobs, hopper.job_history');
      await admin.query('CHECKPOINT');
    },
    async preload(n) {
      await inChunks(n, (k) =>
        admin.query(
          `SELECT hopper.queue_push_batch($1, ARRAY(
             SELECT pg_catalog.jsonb_build_object('n', g) FROM pg_catalog.generate_series(1, $2) g))`,
          [QUEUE, k]));
      await admin.query('VACUUM ANALYZE hopper.jobs');
    },
    unfinished: () => count(admin, 'SELECT pg_catalog.count(*) FROM hopper.jobs'),
    async producer() {
      const c = await connect();
      return {
        push: () => c.query('SELECT hopper.queue_push($1, $2)', [QUEUE, PAYLOAD]),
        close: () => c.end(),
      };
    },
    // A worker's loop: each call completes the jobs the worker holds and leases its next ones, one
    // round trip and one commit per batch.
    async consumer(batch) {
      const c = await connect();
      let ids = [];
      let tokens = [];
      // One job at a time takes the single-job form, as bench/scripts/hop_complete_pull.sql does.
      const call = (held) =>
        batch === 1
          ? c.query(
            `SELECT id, lease_token FROM hopper.queue_complete_pull($1, $2, NULL, $3, 1)`,
            [held.ids[0] ?? null, held.tokens[0] ?? null, QUEUE])
          : c.query(
            `SELECT id, lease_token FROM hopper.queue_complete_many_pull($1::bigint[],
               $2::bigint[], NULL, $3, $4)`,
            [held.ids, held.tokens, QUEUE, batch]);
      return {
        async step() {
          const held = ids.length;
          const r = await call({ ids, tokens });
          ids = r.rows.map((row) => row.id);
          tokens = r.rows.map((row) => row.lease_token);
          return { completed: held, claimed: ids.length };
        },
        close: () => c.end(),
      };
    },
    close: () => admin.end(),
  };
}

function pgBoss() {
  const PgBoss = require('pg-boss');
  let admin;
  let producing;
  let consuming;
  // One instance per side, as a web process and a worker process would each run their own.
  const instance = () => new PgBoss({ max: CONSUMERS });
  return {
    name: 'pg-boss',
    async setup() {
      admin = await adminSession();
      producing = instance();
      consuming = instance();
      for (const boss of [producing, consuming]) {
        boss.on('error', (e) => console.error('pg-boss:', e.message));
        await boss.start();
      }
      await producing.createQueue(QUEUE);
    },
    async reset() {
      // The queue's own partition of pgboss.job (pg-boss 10 makes one per queue), and the archive.
      const r = await admin.query('SELECT partition_name FROM pgboss.queue WHERE name = $1', [QUEUE]);
      const partition = admin.escapeIdentifier(r.rows[0].partition_name);
      await admin.query(`TRUNCATE pgboss.${partition}, pgboss.archive`);
      await admin.query('CHECKPOINT');
    },
    async preload(n) {
      await inChunks(n, (k) =>
        producing.insert(Array.from({ length: k }, (_, i) => ({ name: QUEUE, data: { n: i } }))));
      await admin.query('VACUUM ANALYZE pgboss.job');
    },
    unfinished: () =>
      count(admin, `SELECT pg_catalog.count(*) FROM pgboss.job
                    WHERE name = $1 AND state < 'completed'`, [QUEUE]),
    async producer() {
      return { push: () => producing.send(QUEUE, PAYLOAD), close: async () => {} };
    },
    // What boss.work() does for each batch: fetch, run, complete.
    async consumer(batch) {
      return {
        async step() {
          const jobs = await consuming.fetch(QUEUE, { batchSize: batch });
          if (jobs.length === 0) return { completed: 0, claimed: 0 };
          await consuming.complete(QUEUE, jobs.map((j) => j.id));
          return { completed: jobs.length, claimed: jobs.length };
        },
        close: async () => {},
      };
    },
    async close() {
      for (const boss of [producing, consuming]) await boss.stop({ graceful: false, wait: true });
      await admin.end();
    },
  };
}

// A pool whose idle and checked-out connections report their errors (Graphile Worker asks for it).
function watched(pool) {
  const report = (e) => console.error('Graphile Worker pool:', e.message);
  pool.on('error', report);
  pool.on('connect', (client) => client.on('error', report));
  return pool;
}

function graphileWorker() {
  const { Logger, makeWorkerUtils, run, runMigrations } = require('graphile-worker');
  const silent = new Logger(() => () => {});
  let admin;
  let producingPool;
  let utils;
  return {
    name: 'Graphile Worker',
    async setup() {
      admin = await adminSession();
      producingPool = watched(new Pool({ max: CONSUMERS }));
      await runMigrations({ pgPool: producingPool, logger: silent });
      utils = await makeWorkerUtils({ pgPool: producingPool, logger: silent });
    },
    async reset() {
      await admin.query('TRUNCATE graphile_worker._private_jobs CASCADE');
      await admin.query('CHECKPOINT');
    },
    async preload(n) {
      await inChunks(n, (k) =>
        utils.addJobs(Array.from({ length: k }, (_, i) => ({ identifier: 'noop', payload: { n: i } }))));
      await admin.query('VACUUM ANALYZE graphile_worker._private_jobs');
    },
    unfinished: () => count(admin, 'SELECT pg_catalog.count(*) FROM graphile_worker._private_jobs'),
    async producer() {
      return { push: () => utils.addJob('noop', PAYLOAD), close: async () => {} };
    },
    // Its runner is the only way it hands out jobs: 4 concurrent jobs, on a pool of 4 connections and
    // one for its LISTEN. A batch above 1 turns on its local queue (jobs fetched `batch` at a time)
    // and batched completions, its documented way to higher throughput.
    async runner(batch, onDone) {
      const pool = watched(new Pool({ max: CONSUMERS + 1 }));
      const worker = batch > 1 ? { localQueue: { size: batch }, completeJobBatchDelay: 0 } : {};
      const r = await run({
        pgPool: pool,
        concurrency: CONSUMERS,
        noHandleSignals: true,
        logger: silent,
        taskList: { noop: async () => {} },
        preset: { worker },
      });
      r.events.on('job:success', () => onDone(1));
      return {
        async stop() {
          await r.stop();
          await pool.end();
        },
      };
    },
    async close() {
      await utils.release();
      await producingPool.end();
      await admin.end();
    },
  };
}

module.exports = { CONSUMERS, systems: [baseline, hopper, pgBoss, graphileWorker] };
