// The C++ worker runtime (hopper::Worker) as a bench consumer: THREADS handler threads, each with
// its own connection, run a no-op handler on QUEUE for SECONDS, or until JOBS jobs are completed
// when JOBS > 0 (a drain of a preloaded backlog). Everything else is the runtime's defaults
// (waiting pulls when idle, batched session-bound pulls, heartbeats on a control connection) but
// prefetch, which is max_batch as WorkerOptions::prefetch advises for short jobs on a deep queue;
// PREFETCH in the environment overrides it (e.g. 0: no jobs held beyond the free threads).
// WAITING=off turns the waiting pulls (or takes) off: LISTEN/NOTIFY wake-ups instead.
//
//   worker_consumer CONNINFO QUEUE THREADS SECONDS [JOBS [COMPLETIONS]]
// COMPLETIONS is "batched" (the default: WorkerOptions::batch_completions) or "each" (every job
// completed on its handler's connection, one commit per job), or "take": hopper::TakeWorker
// instead, each thread taking TAKE_BATCH jobs (environment, default 1) per transaction, waiting
// TAKE_GATHER_US microseconds for more when a take finds fewer (TakeWorkerOptions::gather).
// prints one line:
//   completed=N seconds=S rate=R pulls=P failed=F lost=L
// where rate = completed / seconds, and seconds runs from the start of Worker::run() (connections
// included, as a worker process would start) to the stop condition.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include <hopper/hopper.hpp>

namespace {

using Clock = std::chrono::steady_clock;

int usage() {
    std::fprintf(
        stderr,
        "usage: worker_consumer CONNINFO QUEUE THREADS SECONDS [JOBS [batched|each|take]]\n");
    return 2;
}

// Runs `worker` until `seconds` pass or `jobs` jobs are completed (jobs > 0), then prints the
// summary line.
template <typename W>
int measure(W& worker, double seconds, long long jobs) {
    std::atomic<bool> failed{false};
    const auto start = Clock::now();
    std::thread runner([&] {
        try {
            worker.run();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "worker_consumer: %s\n", e.what());
            failed = true;
        }
    });
    const auto deadline = start + std::chrono::duration<double>(seconds);
    // Polling the runtime's own counters costs the database nothing; 1 ms is far below a run.
    uint64_t done = 0;
    auto end = Clock::now();
    while (!failed) {
        end = Clock::now();
        done = worker.stats().completed;
        if (end >= deadline || (jobs > 0 && done >= static_cast<uint64_t>(jobs))) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    worker.stop();
    runner.join();
    if (failed) return 1;

    const hopper::WorkerStats s = worker.stats();
    const double elapsed = std::chrono::duration<double>(end - start).count();
    std::printf("completed=%llu seconds=%.3f rate=%.0f pulls=%llu failed=%llu lost=%llu\n",
                static_cast<unsigned long long>(done), elapsed, elapsed > 0 ? done / elapsed : 0.0,
                static_cast<unsigned long long>(s.pulls), static_cast<unsigned long long>(s.failed),
                static_cast<unsigned long long>(s.lost));
    return 0;
}

bool waiting() {
    const char* v = std::getenv("WAITING");
    return v == nullptr || std::string(v) != "off";
}

int run_take(const char* conninfo, const char* queue, int threads, double seconds, long long jobs) {
    hopper::TakeWorkerOptions options;
    options.conninfo = conninfo;
    options.queue = queue;
    options.concurrency = threads;
    options.name = "bench-runtime";
    options.handle_signals = false;
    options.waiting_takes = waiting();
    if (const char* batch = std::getenv("TAKE_BATCH")) options.batch = std::atoi(batch);
    if (const char* gather = std::getenv("TAKE_GATHER_US"))
        options.gather = std::chrono::microseconds(std::atoll(gather));
    if (options.batch < 1) {
        std::fprintf(stderr, "TAKE_BATCH must be a whole number of jobs >= 1\n");
        return 2;
    }
    hopper::TakeWorker worker(options);
    worker.on_any([](const hopper::Job&, hopper::Client&) {});
    return measure(worker, seconds, jobs);
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 5 || argc > 7) return usage();
    const int threads = std::atoi(argv[3]);
    const double seconds = std::atof(argv[4]);
    const long long jobs = argc >= 6 ? std::atoll(argv[5]) : 0;
    const std::string completions = argc == 7 ? argv[6] : "batched";
    if (threads < 1 || seconds <= 0 || jobs < 0) return usage();
    if (completions != "batched" && completions != "each" && completions != "take") return usage();
    if (completions == "take") return run_take(argv[1], argv[2], threads, seconds, jobs);

    hopper::WorkerOptions options;
    options.conninfo = argv[1];
    options.queue = argv[2];
    options.concurrency = threads;
    options.name = "bench-runtime";
    options.handle_signals = false;
    options.batch_completions = completions == "batched";
    options.prefetch = options.max_batch;
    options.waiting_pulls = waiting();
    if (const char* prefetch = std::getenv("PREFETCH")) {
        char* end = nullptr;
        long v = std::strtol(prefetch, &end, 10);
        if (*prefetch == '\0' || *end != '\0' || v < 0 || v > 1000000) {
            std::fprintf(stderr, "PREFETCH must be a whole number of jobs >= 0, got \"%s\"\n",
                         prefetch);
            return 2;
        }
        options.prefetch = static_cast<int>(v);
    }
    hopper::Worker worker(options);
    worker.on_any([](hopper::JobContext&) {});
    return measure(worker, seconds, jobs);
}
