// A worker whose handlers run inside the transaction that takes their jobs (queue_take): the
// handler's SQL and the job's completion commit together, with no lease, heartbeat or completion
// call. For short jobs whose work is SQL in the same database:
//
//   hopper::TakeWorkerOptions opt;
//   opt.queue = "invoices";
//   opt.concurrency = 4;
//   hopper::TakeWorker worker(opt);
//   worker.on("send", [](const hopper::Job& job, hopper::Client& db) {
//       db.exec("UPDATE invoices SET sent = now() WHERE id = ($1::jsonb->>'invoice')::int",
//               job.payload);
//   });
//   worker.run();  // until SIGINT/SIGTERM or worker.stop()
//
// A handler that returns has its job completed by the commit. When one throws, the take's work is
// rolled back to a savepoint made after the take and that job's failure recorded with
// queue_fail_taken in the same transaction: retried after the queue's backoff, or dead after
// max_attempts; RetryIn and PermanentFailure say how, as for hopper::Worker. The job never leaves
// the worker's hands before its attempt counts; the other jobs of the take have their handlers
// run again and commit. When that COMMIT fails (a deferred constraint, a serialization failure),
// the jobs whose handlers failed are failed again as their handlers asked, and the others fail
// with the COMMIT's error. A process that dies mid-job loses nothing and counts no attempt: the
// transaction rolls back and the job is taken again. Work that runs long, leaves the database or
// may kill its process belongs in hopper::Worker, whose jobs are leased. A handler must not end
// the transaction it runs in: one that runs COMMIT or ROLLBACK (or ends the savepoint
// hopper_take) fails its job, the rest of the take rolled back (after a COMMIT, the take has
// committed with it: its jobs are completed, and the log says so).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "hopper/client.hpp"
#include "hopper/types.hpp"
#include "hopper/worker.hpp"

namespace hopper {

struct TakeWorkerOptions {
    std::string conninfo;  // empty: PG* environment
    std::string queue = "default";
    int concurrency = 1;  // transactions at once, each on its own thread and connection
    // Jobs taken per transaction; they commit together, a failed one with its failure recorded.
    int batch = 1;
    // When a take finds fewer than `batch` jobs, wait this long and take again in the same
    // transaction before running the handlers. A take woken by one push holds one job; in a fast
    // stream of short jobs, a millisecond or two lets the next pushes land, so that one commit
    // carries several jobs instead of one each (at the cost of that much latency). 0: never.
    Duration gather = Duration::zero();
    std::string name;  // recorded as the job's worker, up to 128 bytes; default host:pid
    // An idle thread waits for jobs inside its take (queue_take's wait): the commit that makes a
    // job available wakes it within about a millisecond, with no LISTEN/NOTIFY and no polling;
    // stop() cancels the wait. A role whose statement_timeout cuts the wait falls back to LISTEN
    // + poll_interval. false: the calling thread LISTENs on "hopper:<queue>" and wakes idle
    // threads, which otherwise poll.
    bool waiting_takes = true;
    // How long one waiting take waits (kept to 100 ms .. 30 s: it holds a snapshot meanwhile), or,
    // when listening, the fallback poll when no NOTIFY arrives.
    Duration poll_interval = std::chrono::seconds(2);
    double poll_jitter = 0.25;
    // How long a shutdown waits for open transactions to finish. Then the worker ends them from
    // the server (pg_terminate_backend on their sessions, which needs no more rights than the
    // worker's own role): their handlers' SQL is undone and their jobs are free for other
    // workers at once, with no attempt counted. A handler still running outside the database
    // keeps its thread, and run() returns when it returns.
    Duration shutdown_timeout = std::chrono::seconds(30);
    Duration min_backoff = std::chrono::milliseconds(100);  // after database errors, doubling
    Duration max_backoff = std::chrono::seconds(10);
    bool handle_signals = true;  // SIGINT/SIGTERM start a graceful shutdown during run()
    // Where the worker reports failures and database errors; default: stderr. Called from
    // several threads.
    std::function<void(const std::string&)> log;
};

// The job (lease_token 0: there is no lease) and the connection whose transaction holds it.
using TakeHandler = std::function<void(const Job&, Client&)>;

class TakeWorker {
  public:
    explicit TakeWorker(TakeWorkerOptions options);
    // Destroyed while run() runs in another thread, it calls stop() and waits for run() to return
    // (after the graceful shutdown) before its members go. Not from one of its own handlers, whose
    // thread run() waits for.
    ~TakeWorker();
    TakeWorker(const TakeWorker&) = delete;
    TakeWorker& operator=(const TakeWorker&) = delete;

    // Registers the handler for one job kind; only these kinds are taken. Register before run().
    TakeWorker& on(const std::string& kind, TakeHandler handler);
    // Takes jobs of every kind; those without a handler of their own (and jobs without a kind)
    // run here.
    TakeWorker& on_any(TakeHandler handler);

    // Runs until stop() or a signal; then lets each thread finish the transaction it is in, up
    // to shutdown_timeout, ends those still open, and returns when every thread has stopped.
    // Throws std::logic_error when no handler is registered, and, after that shutdown, the
    // server's hopper::Error when it refused a take for good (SQLSTATE class 22 or 42, 3F000,
    // 0A000: batch above hopper.max_pull, a queue with limits), which retrying would meet forever.
    void run();
    // Starts the graceful shutdown; safe from any thread.
    void stop();

    // completed, failed and released (by the shutdown deadline) count jobs; pulls counts takes
    // that returned at least one job.
    WorkerStats stats() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace hopper
