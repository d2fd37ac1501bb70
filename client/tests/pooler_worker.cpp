// Worker processes for test/e2e/pooler.sh, which runs them behind PgBouncer. Each stops on
// SIGTERM or SIGINT (the runtimes' own signal handling) and prints its stats.
//   hopper_pooler_worker hold CONNINFO QUEUE MS
//       a Worker (one thread, no prefetch) whose handler keeps each job MS milliseconds, then
//       completes it; stops after one job.
//   hopper_pooler_worker progress CONNINFO QUEUE MS
//       the same, reporting progress first (through the heartbeat's connection).
//   hopper_pooler_worker complete_with CONNINFO QUEUE JOBS
//       a Worker of two threads whose handler completes its job with complete_with, recording
//       (id, attempt) in the table `done` in the same transaction; stops after JOBS jobs.
//   hopper_pooler_worker take CONNINFO QUEUE CONCURRENCY
//       a TakeWorker whose handler records (id, attempt) in `done` in the taking transaction.
//   hopper_pooler_worker take_sleep CONNINFO QUEUE SHUTDOWN_TIMEOUT_MS [SECONDS]
//       a TakeWorker (one thread) whose handler sleeps SECONDS (15) in the server.
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <string>

#include "hopper/hopper.hpp"

namespace {

int usage() {
    std::cerr
        << "usage: hopper_pooler_worker hold|progress|complete_with|take|take_sleep CONNINFO QUEUE "
           "N\n";
    return 2;
}

hopper::WorkerOptions worker_options(const std::string& conninfo, const std::string& queue) {
    hopper::WorkerOptions o;
    o.conninfo = conninfo;
    o.queue = queue;
    o.prefetch = 0;
    o.lease = std::chrono::seconds(30);
    o.poll_interval = std::chrono::milliseconds(200);
    o.shutdown_timeout = std::chrono::seconds(5);
    return o;
}

hopper::TakeWorkerOptions take_options(const std::string& conninfo, const std::string& queue) {
    hopper::TakeWorkerOptions o;
    o.conninfo = conninfo;
    o.queue = queue;
    o.poll_interval = std::chrono::milliseconds(200);
    return o;
}

// Runs the worker and prints its stats; 1 when run() throws (a refusal for good).
template <typename W>
int run(W& w) {
    try {
        w.run();
    } catch (const std::exception& e) {
        std::cout << "run threw: " << e.what() << std::endl;
        return 1;
    }
    hopper::WorkerStats s = w.stats();
    std::cout << "completed " << s.completed << " failed " << s.failed << " lost " << s.lost
              << " released " << s.released << std::endl;
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 5 && argc != 6) return usage();
    const std::string mode = argv[1], conninfo = argv[2], queue = argv[3];
    const int n = std::atoi(argv[4]);
    const std::string seconds = argc == 6 ? argv[5] : "15";
    if (mode == "hold" || mode == "progress" || mode == "complete_with") {
        hopper::WorkerOptions o = worker_options(conninfo, queue);
        const bool holds = mode != "complete_with";
        o.concurrency = holds ? 1 : 2;
        const int stop_after = holds ? 1 : n;
        hopper::Worker w(o);
        std::atomic<int> handled{0};
        w.on_any([&](hopper::JobContext& job) {
            if (holds) {
                // A report goes through the heartbeat's connection, as the heartbeats do.
                if (mode == "progress") job.progress(0.5);
                job.wait_for_stop(std::chrono::milliseconds(n));
            } else {
                job.complete_with([&](hopper::Client& c) {
                    c.exec("INSERT INTO done VALUES ($1, $2)", job.id(), job.attempt());
                });
            }
            if (++handled >= stop_after) w.stop();
        });
        return run(w);
    }
    if (mode == "take" || mode == "take_sleep") {
        hopper::TakeWorkerOptions o = take_options(conninfo, queue);
        if (mode == "take") {
            o.concurrency = n;
        } else {
            o.shutdown_timeout = std::chrono::milliseconds(n);
        }
        hopper::TakeWorker w(o);
        w.on_any([&](const hopper::Job& job, hopper::Client& db) {
            if (mode == "take")
                db.exec("INSERT INTO done VALUES ($1, $2)", job.id, job.attempt);
            else
                db.exec("SELECT pg_catalog.pg_sleep($1::float8)", seconds);
        });
        return run(w);
    }
    return usage();
}
