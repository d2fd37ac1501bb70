// Push-to-start latency under a fixed arrival rate, with NOTIFY-driven workers (no busy polling).
//
// PRODUCERS connections push jobs at a fixed total rate (open loop: each producer's job i is due at
// its start + i/(rate/producers), the producers staggered), stamping the time each push is sent
// into the payload. Each consumer connection LISTENs on
// "hopper:<queue>" and, on every wakeup, pulls with queue_complete_pull until the queue is empty
// (completing the job it held with the same call), then sleeps in poll() on the connection's socket
// until the next notification. Latency = time the pull returned the job - time the push was sent.
// Both clocks are this process's steady clock.
//
// HOPPER_LATENCY_WAIT=on: the consumers LISTEN to nothing; once the queue is empty they call
// queue_pull(queue, 1, wait => 200 ms), which sleeps in the server until a push wakes it (no
// NOTIFY involved), and go on with queue_complete_pull from the job it returns.
//
// HOPPER_LATENCY_RUNTIME=worker: the consumer is the C++ worker runtime, one hopper::Worker with
// CONSUMERS handler threads (client/), whose handler records the latency when it starts; it waits
// for jobs in queue_pull when idle, as it does by default. HOPPER_LATENCY_RUNTIME=worker-listen:
// the same worker with waiting_pulls off, woken by LISTEN/NOTIFY.
//
// HOPPER_LATENCY_RELAY=on models wakeups relayed by one server-side process instead of sent by the
// producers: producers push with hopper.notify off (no NOTIFY in their commits), and one relay
// connection with synchronous_commit off checks every HOPPER_LATENCY_RELAY_US microseconds (default
// 500) whether the queue has available jobs (a committed push not yet pulled) and, if so, sends one
// NOTIFY "hopper:<queue>", which costs its asynchronous commit no fsync.
//
//   latency CONNINFO QUEUE RATE SECONDS PRODUCERS CONSUMERS OUT_PREFIX
// writes OUT_PREFIX.txt (one latency in microseconds per line, sorted) and prints a summary line:
//   pushed=N started=N p50_us=.. p90_us=.. p99_us=.. p999_us=.. max_us=.. rate=..
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>

#include <libpq-fe.h>

#include "hopper/worker.hpp"

namespace {

using Clock = std::chrono::steady_clock;

int64_t now_us() {
    return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
        .count();
}

struct ConnDeleter {
    void operator()(PGconn* c) const { PQfinish(c); }
};
struct ResultDeleter {
    void operator()(PGresult* r) const { PQclear(r); }
};
using Conn = std::unique_ptr<PGconn, ConnDeleter>;
using Result = std::unique_ptr<PGresult, ResultDeleter>;

Conn connect(const std::string& conninfo) {
    Conn c(PQconnectdb(conninfo.c_str()));
    if (PQstatus(c.get()) != CONNECTION_OK) {
        std::fprintf(stderr, "latency: connection failed: %s", PQerrorMessage(c.get()));
        std::exit(2);
    }
    return c;
}

Result exec(PGconn* c, const char* sql) {
    Result r(PQexec(c, sql));
    ExecStatusType st = PQresultStatus(r.get());
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        std::fprintf(stderr, "latency: %s failed: %s", sql, PQerrorMessage(c));
        std::exit(2);
    }
    return r;
}

Result exec_params(PGconn* c, const char* name, int n, const char* const* values) {
    Result r(PQexecPrepared(c, name, n, values, nullptr, nullptr, 0));
    if (PQresultStatus(r.get()) != PGRES_TUPLES_OK) {
        std::fprintf(stderr, "latency: %s failed: %s", name, PQerrorMessage(c));
        std::exit(2);
    }
    return r;
}

void prepare(PGconn* c, const char* name, const char* sql, int nparams) {
    Result r(PQprepare(c, name, sql, nparams, nullptr));
    if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) {
        std::fprintf(stderr, "latency: prepare %s failed: %s", name, PQerrorMessage(c));
        std::exit(2);
    }
}

bool env_on(const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && std::string(v) == "on";
}

bool relay_mode() {
    return env_on("HOPPER_LATENCY_RELAY");
}

struct Shared {
    std::atomic<bool> stop{false};
    std::atomic<int64_t> started{0};
    std::mutex mu;
    std::vector<int64_t> latencies;
};

void consumer(const std::string& conninfo, const std::string& queue, Shared& shared) {
    Conn conn = connect(conninfo);
    PGconn* c = conn.get();
    bool wait = env_on("HOPPER_LATENCY_WAIT");
    std::string listen = "LISTEN \"hopper:" + queue + "\"";
    if (!wait) exec(c, listen.c_str());
    // HOPPER_LATENCY_DONE_NOTIFY=off: the consumers send no "hopper:done" on completion.
    const char* done_notify = std::getenv("HOPPER_LATENCY_DONE_NOTIFY");
    if (done_notify != nullptr && std::string(done_notify) == "off")
        exec(c, "SET hopper.notify = off");
    prepare(c, "next",
            "SELECT id, lease_token, (payload->>'t')::bigint FROM hopper.queue_complete_pull("
            "$1::bigint, $2::bigint, NULL, $3::text, 1)",
            3);
    prepare(c, "wait",
            "SELECT id, lease_token, (payload->>'t')::bigint FROM hopper.queue_pull("
            "$1::text, 1, wait => interval '200 ms')",
            1);
    std::vector<int64_t> mine;
    std::string held_id, held_token;
    // Holds the job a pull returned (false when none) and records its latency.
    auto started = [&](const Result& r) {
        int64_t t = now_us();
        if (PQntuples(r.get()) == 0) return false;
        held_id = PQgetvalue(r.get(), 0, 0);
        held_token = PQgetvalue(r.get(), 0, 1);
        mine.push_back(t - std::strtoll(PQgetvalue(r.get(), 0, 2), nullptr, 10));
        shared.started.fetch_add(1, std::memory_order_relaxed);
        return true;
    };
    while (true) {
        // Pull until the queue is empty; each call completes the job pulled by the previous one.
        while (true) {
            const char* params[3] = {held_id.empty() ? nullptr : held_id.c_str(),
                                     held_token.empty() ? nullptr : held_token.c_str(),
                                     queue.c_str()};
            if (!started(exec_params(c, "next", 3, params))) {
                held_id.clear();
                held_token.clear();
                break;
            }
        }
        if (shared.stop.load()) break;
        if (wait) {
            // Sleep in the server until a push wakes this pull (or 200 ms pass).
            const char* params[1] = {queue.c_str()};
            started(exec_params(c, "wait", 1, params));
            continue;
        }
        // Sleep until a notification arrives (or 200 ms pass, only to notice the end of the run).
        bool woke = false;
        while (!woke && !shared.stop.load()) {
            PQconsumeInput(c);
            while (PGnotify* n = PQnotifies(c)) {
                PQfreemem(n);
                woke = true;
            }
            if (woke) break;
            pollfd pfd{PQsocket(c), POLLIN, 0};
            poll(&pfd, 1, 200);
        }
    }
    std::lock_guard<std::mutex> lock(shared.mu);
    shared.latencies.insert(shared.latencies.end(), mine.begin(), mine.end());
}

// The worker runtime as the consumer, until the run ends.
void runtime_consumer(const std::string& conninfo, const std::string& queue, int threads,
                      bool waiting_pulls, Shared& shared) {
    hopper::WorkerOptions o;
    o.conninfo = conninfo;
    o.queue = queue;
    o.concurrency = threads;
    o.waiting_pulls = waiting_pulls;
    o.poll_interval = std::chrono::milliseconds(200);
    o.handle_signals = false;
    hopper::Worker w(o);
    w.on_any([&](hopper::JobContext& job) {
        int64_t t = now_us();
        const std::string& p = job.payload();  // {"t": <microseconds>}
        size_t colon = p.find(':');
        int64_t pushed =
            colon == std::string::npos ? t : std::strtoll(p.c_str() + colon + 1, nullptr, 10);
        std::lock_guard<std::mutex> lock(shared.mu);
        shared.latencies.push_back(t - pushed);
        shared.started.fetch_add(1, std::memory_order_relaxed);
    });
    std::thread stopper([&] {
        while (!shared.stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        w.stop();
    });
    w.run();
    stopper.join();
}

// The wakeup relay: one NOTIFY per batch of newly committed jobs, from an asynchronous commit.
void relay(const std::string& conninfo, const std::string& queue, Shared& shared) {
    Conn conn = connect(conninfo);
    PGconn* c = conn.get();
    exec(c, "SET synchronous_commit = off");
    exec(c, "SET hopper.notify = off");
    prepare(c, "ready",
            "SELECT EXISTS (SELECT 1 FROM hopper.jobs WHERE queue = $1 AND state = 'available' "
            "AND run_at <= pg_catalog.now())",
            1);
    std::string notify = "NOTIFY \"hopper:" + queue + "\"";
    const char* every = std::getenv("HOPPER_LATENCY_RELAY_US");
    int64_t period = every != nullptr ? std::strtoll(every, nullptr, 10) : 500;
    const char* params[1] = {queue.c_str()};
    while (!shared.stop.load()) {
        Result r = exec_params(c, "ready", 1, params);
        if (PQgetvalue(r.get(), 0, 0)[0] == 't') exec(c, notify.c_str());
        std::this_thread::sleep_for(std::chrono::microseconds(period));
    }
}

// Pushes `total` jobs at `rate` per second from `offset_us` after `start`; counts late pushes.
void producer(const std::string& conninfo, const std::string& queue, double rate, int64_t total,
              int64_t start, int64_t offset_us, std::atomic<int64_t>& late) {
    Conn conn = connect(conninfo);
    if (relay_mode()) exec(conn.get(), "SET hopper.notify = off");
    prepare(conn.get(), "push",
            "SELECT hopper.queue_push($1::text, pg_catalog.jsonb_build_object('t', $2::bigint))",
            2);
    int64_t now = now_us();
    if (start > now) std::this_thread::sleep_for(std::chrono::microseconds(start - now));
    for (int64_t i = 0; i < total; ++i) {
        int64_t due = start + offset_us + static_cast<int64_t>(static_cast<double>(i) * 1e6 / rate);
        now = now_us();
        if (due > now)
            std::this_thread::sleep_for(std::chrono::microseconds(due - now));
        else if (now - due > 1000)
            late.fetch_add(1, std::memory_order_relaxed);
        std::string stamp = std::to_string(now_us());
        const char* params[2] = {queue.c_str(), stamp.c_str()};
        exec_params(conn.get(), "push", 2, params);
    }
}

int64_t percentile(const std::vector<int64_t>& sorted, double p) {
    if (sorted.empty()) return 0;
    size_t i = static_cast<size_t>(p * static_cast<double>(sorted.size() - 1) + 0.5);
    return sorted[std::min(i, sorted.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 8) {
        std::fprintf(stderr,
                     "usage: latency CONNINFO QUEUE RATE SECONDS PRODUCERS CONSUMERS OUT_PREFIX\n");
        return 2;
    }
    std::string conninfo = argv[1];
    std::string queue = argv[2];
    double rate = std::atof(argv[3]);
    double seconds = std::atof(argv[4]);
    int producers = std::atoi(argv[5]);
    int consumers = std::atoi(argv[6]);
    std::string out_prefix = argv[7];
    if (rate <= 0 || seconds <= 0 || producers <= 0 || consumers <= 0) {
        std::fprintf(stderr, "latency: RATE, SECONDS, PRODUCERS and CONSUMERS must be positive\n");
        return 2;
    }

    Shared shared;
    std::vector<std::thread> threads;
    const char* runtime = std::getenv("HOPPER_LATENCY_RUNTIME");
    if (runtime != nullptr && *runtime != '\0')
        threads.emplace_back(runtime_consumer, conninfo, queue, consumers,
                             std::string(runtime) == "worker", std::ref(shared));
    else
        for (int i = 0; i < consumers; ++i)
            threads.emplace_back(consumer, conninfo, queue, std::ref(shared));

    // Producers start together 500 ms from now (consumers are listening by then), staggered evenly.
    auto per_producer = static_cast<int64_t>(rate * seconds / producers);
    int64_t total = per_producer * producers;
    double producer_rate = rate / producers;
    int64_t start = now_us() + 500000;
    std::atomic<int64_t> late{0};
    std::vector<std::thread> pushers;
    std::thread relay_thread;
    if (relay_mode()) relay_thread = std::thread(relay, conninfo, queue, std::ref(shared));
    for (int i = 0; i < producers; ++i)
        pushers.emplace_back(producer, conninfo, queue, producer_rate, per_producer, start,
                             static_cast<int64_t>(1e6 / rate * i), std::ref(late));
    for (auto& t : pushers) t.join();
    double elapsed = static_cast<double>(now_us() - start) / 1e6;

    // Let the consumers finish what is queued, for at most 5 s.
    for (int i = 0; i < 500 && shared.started.load() < total; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    shared.stop.store(true);
    for (auto& t : threads) t.join();
    if (relay_thread.joinable()) relay_thread.join();

    std::vector<int64_t>& l = shared.latencies;
    std::sort(l.begin(), l.end());
    std::ofstream out(out_prefix + ".txt");
    for (int64_t v : l) out << v << '\n';
    std::printf(
        "pushed=%" PRId64 " started=%zu late_pushes=%" PRId64 " p50_us=%" PRId64 " p90_us=%" PRId64
        " p99_us=%" PRId64 " p999_us=%" PRId64 " max_us=%" PRId64 " rate=%.0f\n",
        total, l.size(), late.load(), percentile(l, 0.50), percentile(l, 0.90), percentile(l, 0.99),
        percentile(l, 0.999), l.empty() ? 0 : l.back(), static_cast<double>(total) / elapsed);
    return l.size() == static_cast<size_t>(total) ? 0 : 1;
}
