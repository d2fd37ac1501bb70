// The peers bench (bench/peers.sh, `make bench-peers`): the same workloads, from the same Node.js
// process and driver, against the plain-SQL baseline queue, hopper, pg-boss and Graphile Worker, on
// one cluster, interleaved repetition by repetition. Writes a markdown report to PEERS_OUT.
//
// Settings (environment): PEERS_SECONDS (length of each timed run, default 4), PEERS_REPS
// (repetitions, default 3), PEERS_OUT (the report's path), PEERS_ONLY (a comma-separated list of
// workload names, for development).
'use strict';

const fs = require('fs');
const { performance } = require('perf_hooks');
const { CONSUMERS, systems } = require('./systems');

const SECS = Number(process.env.PEERS_SECONDS || 4);
const REPS = Number(process.env.PEERS_REPS || 3);
const OUT = process.env.PEERS_OUT || 'PEERS.md';
const ONLY = process.env.PEERS_ONLY ? process.env.PEERS_ONLY.split(',') : null;
// An idle consumer's pause in the steady state, as bench/scripts' polling workers sleep.
const IDLE_MS = 1;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const times = (n, f) => Promise.all(Array.from({ length: n }, f));
const log = (...args) => console.log(`[peers ${new Date().toISOString().slice(11, 19)}]`, ...args);

// Jobs/s of 4 sessions pushing one job per round trip for SECS.
async function enqueue(sys) {
  await sys.reset();
  const producers = await times(CONSUMERS, () => sys.producer());
  let pushed = 0;
  const start = performance.now();
  const deadline = start + SECS * 1000;
  await Promise.all(producers.map(async (p) => {
    while (performance.now() < deadline) {
      await p.push();
      pushed += 1;
    }
  }));
  const secs = (performance.now() - start) / 1000;
  await Promise.all(producers.map((p) => p.close()));
  return pushed / secs;
}

// Consumers that claim and complete until `deadline` (or, with stopWhenEmpty, until a claim finds
// nothing). Returns the jobs completed.
async function consume(sys, batch, deadline, stopWhenEmpty) {
  let completed = 0;
  const consumers = await times(CONSUMERS, () => sys.consumer(batch));
  const begin = performance.now();
  await Promise.all(consumers.map(async (c) => {
    while (performance.now() < deadline(begin)) {
      const r = await c.step();
      completed += r.completed;
      if (r.claimed > 0) continue;
      if (stopWhenEmpty) break;
      await sleep(IDLE_MS);
    }
  }));
  await Promise.all(consumers.map((c) => c.close()));
  return { completed, secs: (performance.now() - begin) / 1000 };
}

// Graphile Worker's runner until `deadline`, or until `target` jobs are done.
async function runUntil(sys, batch, secs, target) {
  let completed = 0;
  let counting = false;
  let finish;
  const finished = new Promise((resolve) => (finish = resolve));
  const runner = await sys.runner(batch, (k) => {
    if (!counting) return;
    completed += k;
    if (target && completed >= target) finish();
  });
  counting = true;
  const begin = performance.now();
  const timer = setTimeout(finish, secs * 1000);
  await finished;
  clearTimeout(timer);
  const elapsed = (performance.now() - begin) / 1000;
  await runner.stop();
  return { completed, secs: elapsed };
}

// The jobs counted must be the jobs the queue finished. A runner's count may be off by the jobs in
// flight when it stopped: Graphile Worker reports a job's success before its completion commits.
async function check(sys, created, counted, batch) {
  const finished = created - (await sys.unfinished());
  const slack = sys.runner ? 2 * CONSUMERS * batch : 0;
  if (Math.abs(finished - counted) > slack)
    throw new Error(`${sys.name}: counted ${counted} jobs, the queue finished ${finished}`);
}

// A preloaded backlog drained by 4 consumers pulling `batch` at a time, for SECS or until empty.
async function drain(sys, batch, backlog) {
  await sys.reset();
  await sys.preload(backlog);
  const r = sys.runner
    ? await runUntil(sys, batch, SECS, backlog)
    : await consume(sys, batch, (begin) => begin + SECS * 1000, true);
  await check(sys, backlog, r.completed, batch);
  return r.completed / r.secs;
}

// 4 producers pushing one job per round trip while 4 consumers pull one at a time: jobs completed
// per second.
async function steady(sys) {
  await sys.reset();
  const producers = await times(CONSUMERS, () => sys.producer());
  const start = performance.now();
  const deadline = start + SECS * 1000;
  let pushed = 0;
  const producing = Promise.all(producers.map(async (p) => {
    while (performance.now() < deadline) {
      await p.push();
      pushed += 1;
    }
  }));
  const r = sys.runner
    ? await runUntil(sys, 1, SECS, 0)
    : await consume(sys, 1, () => deadline, false);
  await producing;
  await Promise.all(producers.map((p) => p.close()));
  await check(sys, pushed, r.completed, 1);
  return r.completed / r.secs;
}

const workloads = [
  { name: 'enqueue', label: 'enqueue single, 4 producers', run: enqueue },
  { name: 'drain1', label: 'drain pulling 1, 4 consumers', run: (s) => drain(s, 1, 10000 * SECS) },
  { name: 'drain10', label: 'drain pulling 10, 4 consumers', run: (s) => drain(s, 10, 40000 * SECS) },
  { name: 'steady', label: 'steady state 4 producers + 4 consumers (completed)', run: steady },
].filter((w) => !ONLY || ONLY.includes(w.name));

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const fmt = (x) => Math.round(x).toLocaleString('en-US');

async function settings() {
  const { Client } = require('pg');
  const c = new Client();
  await c.connect();
  const names = ['server_version', 'shared_buffers', 'synchronous_commit', 'max_wal_size',
    'checkpoint_timeout', 'autovacuum'];
  const r = await c.query(
    'SELECT name, setting, unit FROM pg_catalog.pg_settings WHERE name = ANY ($1) ORDER BY name',
    [names]);
  await c.end();
  return r.rows.map((row) => `${row.name} = ${row.setting}${row.unit ? ` (${row.unit})` : ''}`);
}

function report(results, meta, names) {
  const lines = [];
  lines.push('# hopper against pg-boss and Graphile Worker');
  lines.push('');
  lines.push(`Made by \`make bench-peers\` (bench/peers.sh, bench/peers/run.js), ${meta.started}, ` +
    `${meta.seconds} s per run, ${REPS} repetitions interleaved across the four queues; each cell is ` +
    'the median in jobs/s with the range, and the ratio to the baseline queue\'s median.');
  lines.push('');
  lines.push('Every queue is driven from one Node.js process with the same four sessions per side: ' +
    'the baseline and hopper through node-postgres (`pg`), pg-boss and Graphile Worker through their ' +
    'own APIs (`send`, `fetch` + `complete`; `addJob`, and the runner with `concurrency: 4`, whose ' +
    'local queue and batched completions are on for the batch-of-10 drain).');
  lines.push('');
  lines.push('| workload | ' + names.join(' | ') + ' |');
  lines.push('|---|' + names.map(() => '---|').join(''));
  for (const w of workloads) {
    const base = median(results[w.name][names[0]]);
    const cells = names.map((n) => {
      const xs = results[w.name][n];
      const m = median(xs);
      return `${fmt(m)} (${fmt(Math.min(...xs))}–${fmt(Math.max(...xs))}); ${(m / base).toFixed(2)}x`;
    });
    lines.push(`| ${w.label} | ${cells.join(' | ')} |`);
  }
  lines.push('');
  lines.push('Versions and settings:');
  lines.push('');
  lines.push('```');
  lines.push(`node ${process.version}; ${meta.versions.join('; ')}`);
  for (const s of meta.settings) lines.push(s);
  lines.push('```');
  lines.push('');
  fs.writeFileSync(OUT, lines.join('\n'));
}

async function main() {
  const started = new Date().toISOString().replace('T', ' ').slice(0, 16) + ' UTC';
  const queues = systems.map((make) => make());
  for (const q of queues) await q.setup();
  const results = {};
  for (const w of workloads) {
    results[w.name] = {};
    for (const q of queues) results[w.name][q.name] = [];
  }
  for (let rep = 1; rep <= REPS; rep += 1) {
    for (const w of workloads) {
      for (const q of queues) {
        const rate = await w.run(q);
        results[w.name][q.name].push(rate);
        log(`rep ${rep} ${w.name} ${q.name}: ${fmt(rate)} jobs/s`);
      }
    }
  }
  const pkg = (name) => `${name} ${require(`${name}/package.json`).version}`;
  const meta = {
    started,
    seconds: SECS,
    versions: [pkg('pg-boss'), pkg('graphile-worker'), pkg('pg')],
    settings: await settings(),
  };
  for (const q of queues) await q.close();
  report(results, meta, queues.map((q) => q.name));
  log(`wrote ${OUT}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
