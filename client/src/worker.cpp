// Worker: a fetch loop on the calling thread (batched pulls, session-bound unless behind a
// connection pooler; when idle it waits in the server on a second connection, or LISTENs), N
// handler threads with a connection each, and the heartbeat thread.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "backoff.hpp"
#include "deadline.hpp"
#include "handler_failure.hpp"
#include "heartbeat.hpp"
#include "hopper/worker.hpp"
#include "joined_threads.hpp"
#include "option_checks.hpp"
#include "run_state.hpp"
#include "signals.hpp"
#include "waiting_pull.hpp"
#include "wakeup.hpp"
#include "worker_client.hpp"
#include "worker_name.hpp"

namespace hopper {

using internal::Backoff;
using Steady = std::chrono::steady_clock;
constexpr std::chrono::milliseconds kGatherWait{20};
// How often a shutdown waiting for its handlers looks for a second signal.
constexpr std::chrono::milliseconds kSignalLook{100};

struct Worker::Impl {
    WorkerOptions opt;
    std::map<std::string, Handler> handlers;
    Handler fallback;

    std::atomic<bool> stop_requested{false};
    internal::RunState run_state;
    internal::Wakeup wake;

    int capacity = 0;     // jobs claimed at once: concurrency + prefetch
    int64_t claimed = 0;  // in all, for max_jobs; the fetch loop's

    std::mutex m;                     // guards pending, in_flight, handlers_done
    std::condition_variable work_cv;  // a job is pending, or the handler threads must end
    std::condition_variable idle_cv;  // a job finished
    std::deque<Job> pending;  // pulled, not started: held by the heartbeat like running jobs
    int in_flight = 0;        // pending + running
    bool handlers_done = false;
    // Jobs whose handlers returned, waiting for the fetch loop to complete them
    // (batch_completions), and whether it still takes them: from the loop's start until shutdown
    // begins. `unreported` holds the ones the fetch loop has taken and not yet completed; only its
    // thread touches it.
    struct Returned {
        Job job;
        std::optional<std::string> result;
        StopReason stopped;
    };
    std::vector<Returned> returned;
    bool taking_returned = false;
    std::vector<Returned> unreported;

    std::atomic<uint64_t> completed{0}, failed{0}, lost{0}, released{0}, pulls{0};
    // The server's error for a pull refused for good, which run() throws (the fetch loop's).
    std::exception_ptr refusal;
    bool told_pooled = false;  // the log says the worker found a pooler; the fetch loop's
    // When the shutdown's deadline passes (shutdown() sets it): reports that keep failing on a
    // lost connection give up then, rather than hold run() up for their full minute.
    std::atomic<Steady::rep> shutdown_deadline{
        Steady::time_point::max().time_since_epoch().count()};

    explicit Impl(WorkerOptions o) : opt(std::move(o)) {
        if (opt.concurrency < 1) throw std::invalid_argument("concurrency must be at least 1");
        if (opt.max_batch < 1) throw std::invalid_argument("max_batch must be at least 1");
        internal::check_worker_options(opt.queue, opt.name, opt.poll_interval, opt.poll_jitter,
                                       opt.shutdown_timeout);
        if (opt.lease && (*opt.lease <= Duration::zero() || *opt.lease > std::chrono::hours(24)))
            throw std::invalid_argument("lease must be more than 0 and at most 24 h");
        if (!opt.prefetch) opt.prefetch = opt.concurrency;
        if (*opt.prefetch < 0) throw std::invalid_argument("prefetch must not be negative");
        if (opt.max_jobs && *opt.max_jobs < 1)
            throw std::invalid_argument("max_jobs must be at least 1");
        capacity = opt.concurrency + *opt.prefetch;
        if (opt.name.empty()) opt.name = internal::default_worker_name();
        if (!opt.log)
            opt.log = [](const std::string& msg) {
                std::cerr << "hopper worker: " << msg << std::endl;
            };
        opt.log = internal::guarded_log(std::move(opt.log));
    }

    // Set by run() before its threads start and reset after they end, when it handles signals.
    std::optional<internal::SignalWatch> signals;

    bool stopping() const { return stop_requested.load() || (signals && signals->received()); }
    uint64_t signals_seen() const { return signals ? signals->count() : 0; }

    void log(const std::string& msg) const { opt.log(msg); }

    // Sleeps up to d, waking early on stop() or SIGINT/SIGTERM. A signal handler may not notify a
    // condition variable (not async-signal-safe), and a wait it interrupts resumes by itself, so
    // the wait looks at the signal's flag every 100 ms.
    void pause(Duration d) {
        const auto until = internal::deadline_after(d);
        std::unique_lock<std::mutex> lock(m);
        while (!stopping()) {
            auto left = until - Steady::now();
            if (left <= Steady::duration::zero()) return;
            idle_cv.wait_for(lock, std::min<Steady::duration>(left, std::chrono::milliseconds(100)),
                             [&] { return stopping(); });
        }
    }

    // Connects `client`, or connects it again in place (what its handlers set on its connection,
    // Connection::on_connect and listen, is made again on the new one), retried with back-off
    // until it works or `give_up()`, asked after each failure, says to stop trying.
    template <typename GiveUp>
    bool connect(std::unique_ptr<Client>& client, Backoff& backoff, GiveUp give_up) {
        while (true) {
            try {
                if (client)
                    client->reconnect();
                else
                    client = internal::worker_client(opt.conninfo);
                return true;
            } catch (const std::exception& ex) {
                if (give_up()) return false;
                Duration d = backoff.next();
                log(fmt::format("cannot connect (retrying in {} ms): {}", d.count() / 1000,
                                ex.what()));
                pause(d);
            }
        }
    }

    void fetch_loop(internal::Heartbeat& hb);
    PullOptions pull_options(int n, Client& via);
    void take_returned();
    void hand_out(std::vector<Job>& jobs, internal::Heartbeat& hb);
    int slots_free();
    int jobs_left() const;
    bool all_jobs_done();
    void handler_thread(internal::Heartbeat& hb);
    bool handler_connection(std::unique_ptr<Client>& client, Backoff& backoff);
    void process(Client& client, internal::Heartbeat& hb, const Job& job);
    void report(Client& client, const Job& job, const std::function<void()>& run);
    bool complete_job(Client& client, const Job& job, const std::optional<std::string>& result);
    std::optional<JobState> fail_job(Client& client, const Job& job, std::string error,
                                     FailOptions fo);
    bool hand_over(const Job& job, const std::optional<std::string>& result, StopReason stopped);
    std::vector<Job> complete_and_pull(Client& conn, internal::Heartbeat& hb,
                                       const PullOptions* po);
    void complete_one_by_one(Client& conn, internal::Heartbeat& hb);
    void report_unreported(Client* fetcher, internal::Heartbeat& hb, uint64_t begun_by);
    void account(Client& client, const Returned& f, bool held);
    std::string why_not_ours(Client& client, int64_t id, StopReason stopped);
    const Handler* handler_for(const Job& job) const;
    void shutdown(Client* fetcher, internal::Heartbeat& hb, uint64_t begun_by);
};

Worker::Worker(WorkerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}
// run() in another thread uses everything destroyed here: it is stopped and waited for first.
Worker::~Worker() {
    impl_->run_state.stop_and_wait([this] { stop(); });
}

Worker& Worker::on(const std::string& kind, Handler handler) {
    impl_->handlers[kind] = std::move(handler);
    return *this;
}

Worker& Worker::on_any(Handler handler) {
    impl_->fallback = std::move(handler);
    return *this;
}

void Worker::stop() {
    impl_->stop_requested.store(true);
    impl_->wake.notify();
    impl_->idle_cv.notify_all();
}

WorkerStats Worker::stats() const {
    return {impl_->completed.load(), impl_->failed.load(), impl_->lost.load(),
            impl_->released.load(), impl_->pulls.load()};
}

void Worker::run() {
    Impl& w = *impl_;
    // The last of run(): a waiting ~Worker may destroy w once it is done.
    internal::RunState::Scope run_scope(w.run_state, "Worker::run is already running");
    if (w.opt.handle_signals) w.signals.emplace(w.wake);
    struct Unwatch {  // declared before the threads, so it runs after they are joined
        std::optional<internal::SignalWatch>& signals;
        ~Unwatch() { signals.reset(); }
    } unwatch{w.signals};
    {
        std::lock_guard<std::mutex> lock(w.m);
        w.handlers_done = false;
    }
    internal::Heartbeat hb(w.opt.conninfo, w.opt.lease, w.opt.min_backoff, w.opt.max_backoff,
                           w.opt.log);
    // Declared after the heartbeat, so the handler threads, which use it, end first.
    internal::JoinedThreads threads([&w] {
        w.stop_requested.store(true);  // already, unless the fetch loop ended by an exception
        {
            std::lock_guard<std::mutex> lock(w.m);
            w.handlers_done = true;
            // Should the fetch loop have ended by an exception, handlers complete their own jobs.
            w.taking_returned = false;
        }
        w.work_cv.notify_all();
    });
    for (int i = 0; i < w.opt.concurrency; ++i) threads.start([&w, &hb] { w.handler_thread(hb); });
    w.fetch_loop(hb);
    threads.join();
    if (w.refusal) std::rethrow_exception(w.refusal);
}

// The options of a pull on `via` (the fetch loop's connection: the waiting pull's has the same
// conninfo, so the same pooler or none).
PullOptions Worker::Impl::pull_options(int n, Client& via) {
    PullOptions po;
    po.n = std::min(n, opt.max_batch);
    po.lease = opt.lease;
    po.worker = opt.name;
    // The lease is bound to the pulling connection too: if this process dies, the server sees the
    // backend gone and the reaper rescues the jobs at once. Not behind a pooler: the server
    // session is the pooler's, which may close it while the job runs on (the reaper would hand
    // the job to another worker), and keeps it open when this process dies.
    const bool pooled = via.connection().pooled();
    po.session_bound = opt.session_bound.value_or(!pooled);
    if (pooled && !opt.session_bound && !told_pooled) {
        told_pooled = true;
        log("the connections go through a connection pooler (its pid is not the server's, or "
            "HOPPER_POOLER=on): leases are not bound to server sessions, so the jobs of a worker "
            "process that dies are taken over when their leases run out");
    }
    return po;
}

// Moves the jobs whose handlers returned to the fetch loop's own list, to be completed.
void Worker::Impl::take_returned() {
    std::lock_guard<std::mutex> lock(m);
    for (auto& f : returned) unreported.push_back(std::move(f));
    returned.clear();
}

// Holds pulled jobs (heartbeated from now on) and hands them to the handler threads.
void Worker::Impl::hand_out(std::vector<Job>& jobs, internal::Heartbeat& hb) {
    if (jobs.empty()) return;
    ++pulls;
    claimed += static_cast<int>(jobs.size());
    for (const Job& j : jobs) hb.hold(j);
    {
        std::lock_guard<std::mutex> lock(m);
        for (auto& j : jobs) pending.push_back(std::move(j));
        in_flight += static_cast<int>(jobs.size());
    }
    work_cv.notify_all();
}

int Worker::Impl::slots_free() {
    std::lock_guard<std::mutex> lock(m);
    return capacity - in_flight;
}

// What max_jobs leaves to claim.
int Worker::Impl::jobs_left() const {
    return opt.max_jobs ? static_cast<int>(std::max<int64_t>(0, *opt.max_jobs - claimed))
                        : capacity;
}

// max_jobs: every job run() may claim was claimed, and its handler has returned.
bool Worker::Impl::all_jobs_done() {
    if (jobs_left() > 0) return false;
    std::lock_guard<std::mutex> lock(m);
    return in_flight == 0;
}

void Worker::Impl::fetch_loop(internal::Heartbeat& hb) {
    const std::string channel = "hopper:" + opt.queue;
    // One back-off per connection, each reset only by its own success: a waiting pull that cannot
    // reconnect was otherwise retried every min_backoff, as each pull on the other connection
    // reset the shared one.
    Backoff backoff(opt.min_backoff, opt.max_backoff);
    Backoff waiter_backoff(opt.min_backoff, opt.max_backoff);
    // When the waiting pull failed, it is not tried again before this; meanwhile the loop waits on
    // its own connection, which completes the jobs that finish and pulls at the retry. (Pausing
    // the loop for the back-off held those completions, unheartbeated, for up to max_backoff.)
    Steady::time_point waiter_retry_at{};
    Duration waiter_wait{};  // of the waiting pull in flight
    std::unique_ptr<Client> conn;
    internal::WaitingPull waiter(opt.queue);
    bool listening = !opt.waiting_pulls;  // LISTEN + poll instead of waiting pulls
    bool listened = false;                // the LISTEN is in place on `conn`
    bool deep = false;  // the last pull filled every free slot: there is probably more
    bool gathered = false;
    const int batch_target = std::max(1, std::min(opt.max_batch, capacity) / 2);
    if (opt.batch_completions) {
        std::lock_guard<std::mutex> lock(m);
        taking_returned = true;
    }
    while (!stopping()) {
        if (all_jobs_done()) {
            // As stop() does: the shutdown completes the jobs handed over meanwhile.
            stop_requested.store(true);
            break;
        }
        bool on_waiter = false;  // what failed, if anything does: the waiting pull's connection
        try {
            if (!conn) {
                if (!connect(conn, backoff, [&] { return stopping(); })) break;
                listened = false;
                deep = true;  // jobs may have arrived while we were away
            } else if (!conn->connection().ok()) {
                conn->reconnect();
                listened = false;
                deep = true;
            }
            if (listening && !listened) {
                conn->connection().listen(channel);
                listened = true;
            }
            if (waiter.in_flight()) {
                // Jobs that finished meanwhile are completed on this connection while the other
                // one waits; a freed slot needs nothing (the waiting pull returns what came).
                take_returned();
                if (!unreported.empty()) complete_and_pull(*conn, hb, nullptr);
                on_waiter = true;
                std::optional<internal::WaitingPull::Outcome> got = waiter.await(wake.fd());
                on_waiter = false;
                wake.drain();
                if (!got) continue;
                waiter_backoff.reset();
                hand_out(got->jobs, hb);
                deep = got->filled;
                if (got->did_not_wait) {
                    // The server does not wait for this queue (rate limits): LISTEN instead.
                    log(fmt::format("queue {} does not wait in queue_pull; listening on {}",
                                    opt.queue, channel));
                    listening = true;
                }
                continue;
            }
            const int left = jobs_left();
            int free_slots = std::min(slots_free(), left);
            if (free_slots > 0 && deep && free_slots < std::min(batch_target, left) && !gathered) {
                // The queue is deep but only a slot or two is free: give the other handlers a
                // moment to finish too, so one pull fills several slots instead of one each.
                // (With prefetch >= batch_target the handlers still have held jobs meanwhile.)
                gathered = true;
                std::unique_lock<std::mutex> lock(m);
                idle_cv.wait_for(lock, kGatherWait, [&] {
                    return stopping() || capacity - in_flight >= batch_target;
                });
                continue;
            }
            take_returned();
            if (free_slots > 0 && deep) {
                gathered = false;
                PullOptions po = pull_options(free_slots, *conn);
                std::vector<Job> jobs = complete_and_pull(*conn, hb, &po);
                backoff.reset();
                deep = static_cast<int>(jobs.size()) == po.n;
                hand_out(jobs, hb);
                if (deep) continue;
            } else if (!unreported.empty()) {
                complete_and_pull(*conn, hb, nullptr);
            }
            if (!listening && Steady::now() >= waiter_retry_at) {
                if (int n = std::min(slots_free(), jobs_left()); n > 0) {
                    // Nothing left to pull: wait in the server until a job is made available.
                    // While it fails, the pulls above still find jobs and waiter_retry_at spaces
                    // the attempts.
                    on_waiter = true;
                    if (!waiter.connected()) waiter.attach(internal::worker_client(opt.conninfo));
                    PullOptions po = pull_options(n, *conn);
                    po.wait = internal::server_wait(opt.poll_interval, opt.poll_jitter);
                    waiter_wait = *po.wait;
                    waiter.start(po);
                    continue;
                }
            }
            // A NOTIFY that arrived with the pull's reply sits in libpq's queue, not the socket.
            if (!conn->connection().notifications().empty()) {
                deep = true;
                if (free_slots > 0) continue;
            }
            // Wait for a NOTIFY, a freed slot, stop() or a signal; poll anyway now and then.
            // Rounded up: a wait that ended just short of the waiting pull's retry would
            // otherwise come back with 0 ms to go and pull in a loop until it is due.
            auto wait = std::chrono::ceil<std::chrono::milliseconds>(
                internal::listen_poll(opt.poll_interval, opt.poll_jitter));
            if (auto now = Steady::now(); !listening && waiter_retry_at > now)
                wait = std::min(
                    wait, std::chrono::ceil<std::chrono::milliseconds>(waiter_retry_at - now));
            bool woke = conn->connection().wait(wait, wake.fd());
            wake.drain();
            bool notified = !conn->connection().notifications().empty();
            // A freed slot only matters when the queue was deep; a poll tick or NOTIFY always does.
            if (notified || !woke) deep = true;
            if (slots_free() > 0 && free_slots <= 0) deep = true;
        } catch (const std::exception& ex) {
            const auto* err = dynamic_cast<const Error*>(&ex);
            if (err && internal::refused_for_good(*err)) {
                // A pull the server refuses every time (its options, the database's objects or
                // rights): retried, it was refused forever without taking a job. run() throws it.
                log(fmt::format("pull from queue {} was refused, the worker stops: {}", opt.queue,
                                ex.what()));
                refusal = std::current_exception();
                stop_requested.store(true);
                break;
            }
            if (err && err->sqlstate() == sqlstate::kQueryCanceled && on_waiter &&
                !waiter.in_flight() && !listening && conn &&
                internal::statement_timeout_cuts(*conn, waiter_wait)) {
                // This role cannot wait in the server. (An operator's cancel is retried below.)
                log(
                    fmt::format("waiting pull on queue {} ended by statement_timeout ({}); "
                                "listening on {}",
                                opt.queue, ex.what(), channel));
                listening = true;
                deep = true;
                continue;
            }
            Duration d = (on_waiter ? waiter_backoff : backoff).next();
            log(fmt::format("{} queue {} failed (retrying in {} ms): {}",
                            on_waiter ? "waiting pull on" : "pull from", opt.queue,
                            d.count() / 1000, ex.what()));
            deep = true;
            if (on_waiter)
                waiter_retry_at = internal::deadline_after(d);
            else
                pause(d);
        }
    }
    // The signals that began the shutdown: one, or none when stop() did. Any after it hurries it.
    const uint64_t begun_by = std::min<uint64_t>(signals_seen(), 1);
    // A pull still waiting is ended; what it claimed meanwhile goes back with the unstarted jobs.
    std::vector<Job> late = waiter.cancel();
    hand_out(late, hb);
    shutdown(conn.get(), hb, begun_by);
}

void Worker::Impl::shutdown(Client* fetcher, internal::Heartbeat& hb, uint64_t begun_by) {
    const auto deadline = internal::deadline_after(opt.shutdown_timeout);
    shutdown_deadline.store(deadline.time_since_epoch().count());
    // Jobs pulled but not started go back at once, without an attempt penalty.
    std::deque<Job> unstarted;
    {
        std::lock_guard<std::mutex> lock(m);
        unstarted.swap(pending);
        in_flight -= static_cast<int>(unstarted.size());
        // From here on handlers complete their own jobs; the ones handed over are completed now.
        taking_returned = false;
        for (auto& f : returned) unreported.push_back(std::move(f));
        returned.clear();
    }
    idle_cv.notify_all();
    report_unreported(fetcher, hb, begun_by);
    for (const Job& j : unstarted) {
        hb.remove(j);
        try {
            if (fetcher && fetcher->release(j.id, j.lease_token)) ++released;
        } catch (const std::exception& ex) {
            log(fmt::format("could not release job {}: {}", j.id, ex.what()));
        }
    }
    // Running jobs get until the deadline to finish; then they are told to stop, and each is
    // released when its handler returns. Not before: a handler that goes on working on a job
    // given back would run it at the same time as the worker that takes it next. A thread cannot
    // be ended from outside, so this waits for every handler, however long it takes; meanwhile
    // the jobs are heartbeated, and this connection, which their session-bound leases may be
    // bound to, stays open.
    // A second SIGINT/SIGTERM (Ctrl-C pressed again) does now what the deadline would. A signal
    // handler cannot notify a condition variable, so with signals handled the wait looks at their
    // count every 100 ms.
    auto hurried = [&] { return signals_seen() > begun_by; };
    std::unique_lock<std::mutex> lock(m);
    while (in_flight != 0 && !hurried()) {
        auto now = Steady::now();
        if (now >= deadline) break;
        auto until = signals ? std::min<Steady::time_point>(deadline, now + kSignalLook) : deadline;
        idle_cv.wait_until(lock, until, [&] { return in_flight == 0; });
    }
    if (in_flight == 0) return;
    lock.unlock();
    const bool hurry = hurried();
    // Reports that keep failing give up now too, as past the deadline.
    if (hurry) shutdown_deadline.store(Steady::now().time_since_epoch().count());
    internal::Heartbeat::Stopped stopped = hb.stop_all(StopReason::Shutdown);
    released += static_cast<uint64_t>(stopped.released);
    std::string ids;
    for (int64_t id : stopped.running) ids += (ids.empty() ? "" : ", ") + std::to_string(id);
    log(fmt::format(
        "{}: told the handlers of job(s) {} to stop; waiting for them, each job is released when "
        "its handler returns",
        hurry ? "second signal during shutdown" : "shutdown deadline passed",
        ids.empty() ? "(none)" : ids));
    lock.lock();
    idle_cv.wait(lock, [&] { return in_flight == 0; });
}

void Worker::Impl::handler_thread(internal::Heartbeat& hb) {
    Backoff backoff(opt.min_backoff, opt.max_backoff);
    std::unique_ptr<Client> client;
    while (true) {
        Job job;
        {
            std::unique_lock<std::mutex> lock(m);
            // Once stopping, held jobs are left to shutdown(), which gives them back unstarted:
            // also those handed out just before it (the waiting pull's, cancelled by the stop).
            // Only a fetch loop that ended by an exception leaves them to the handlers.
            work_cv.wait(lock, [&] { return handlers_done || (!pending.empty() && !stopping()); });
            if (pending.empty()) return;
            job = std::move(pending.front());
            pending.pop_front();
        }
        if (handler_connection(client, backoff)) {
            process(*client, hb, job);
        } else {
            // Shutting down before a connection came back: leave the job to its lease.
            hb.remove(job);
            log(fmt::format("job {} not run: no connection during shutdown", job.id));
        }
        {
            std::lock_guard<std::mutex> lock(m);
            --in_flight;
        }
        idle_cv.notify_all();
        wake.notify();
    }
}

// Makes the handler thread's connection ready for the next job: connects at the first, and again
// when the server has closed it meanwhile. A server restart closes the idle handler connections,
// which look open until used: the job's handler met the loss at its first statement, and the job,
// pulled after the restart, failed an attempt it never got to make. Noticed without a round trip
// (internal::still_open), so a job costs no more than before. Retried with back-off; false when
// the worker is stopping and no connection could be made.
bool Worker::Impl::handler_connection(std::unique_ptr<Client>& client, Backoff& backoff) {
    if (client && internal::still_open(client->connection())) return true;
    if (!connect(client, backoff, [&] { return stopping(); })) return false;
    backoff.reset();
    return true;
}

const Handler* Worker::Impl::handler_for(const Job& job) const {
    if (job.kind) {
        auto it = handlers.find(*job.kind);
        if (it != handlers.end()) return &it->second;
    }
    return fallback ? &fallback : nullptr;
}

void Worker::Impl::process(Client& client, internal::Heartbeat& hb, const Job& job) {
    JobContext ctx(job, client,
                   [&hb, id = job.id, token = job.lease_token](
                       double f, const std::optional<std::string>& detail) {
                       return hb.progress(id, token, f, detail);
                   });
    if (StopReason gone = hb.add(job, ctx); gone != StopReason::None) {
        // Held too long, or cancelled meanwhile: it may run elsewhere already.
        if (gone != StopReason::Shutdown) {
            ++lost;
            log(fmt::format("job {} not started: no longer ours ({})", job.id, to_string(gone)));
        }
        return;
    }
    enum class Outcome { Complete, Fail };
    Outcome outcome = Outcome::Complete;
    std::string error;
    FailOptions fo;
    if (const Handler* h = handler_for(job)) {
        try {
            (*h)(ctx);
        } catch (...) {
            outcome = Outcome::Fail;
            internal::HandlerFailure f = internal::handler_failure(std::current_exception());
            error = std::move(f.error);
            fo = f.options;
        }
    } else {
        outcome = Outcome::Fail;
        std::string known;
        for (const auto& [k, _] : handlers) known += (known.empty() ? "" : ", ") + k;
        error = fmt::format("no handler for kind {} on worker {} (it handles: {})",
                            job.kind ? "\"" + *job.kind + "\"" : std::string("(none)"), opt.name,
                            known.empty() ? "nothing" : known);
    }
    // Its lease is kept until the outcome is reported, below or in the fetch loop's batch.
    hb.finish(job);
    struct Forget {
        internal::Heartbeat& hb;
        const Job& job;
        bool handed_over = false;
        ~Forget() {
            if (!handed_over) hb.remove(job);
        }
    } forget{hb, job};
    // A handler that left a transaction open (begun and never ended, or failed inside it) would
    // have this job's report, and every later job of this thread, run inside it: it is rolled
    // back, and a job that was to complete fails instead, since what its handler wrote there is
    // gone.
    if (client.connection().in_transaction()) {
        try {
            client.exec("ROLLBACK");
        } catch (const std::exception&) {
            // A connection lost meanwhile took the transaction with it; the next call reconnects.
        }
        log(fmt::format("job {}: its handler left a transaction open; rolled back", job.id));
        if (outcome == Outcome::Complete) {
            outcome = Outcome::Fail;
            error = "the handler left a transaction open; it was rolled back";
        }
    }
    StopReason stopped = ctx.stop_reason();
    switch (ctx.finished_as()) {
        case JobContext::Finished::Completed:
            ++completed;
            return;
        case JobContext::Finished::Failed:
            ++failed;
            return;
        case JobContext::Finished::Released:
            ++released;
            return;
        case JobContext::Finished::No:
            break;
    }
    if (stopped == StopReason::Shutdown) {
        // Told to stop by the shutdown deadline: what it returns says nothing of the work (a
        // handler that returns early on its stop flag would otherwise be completed).
        report(client, job, [&] {
            if (client.release(job.id, job.lease_token)) ++released;
        });
        return;
    }
    if (outcome == Outcome::Complete && hand_over(job, ctx.result(), stopped)) {
        forget.handed_over = true;  // the fetch loop forgets it once its completion commits
        return;
    }
    report(client, job, [&] {
        bool held;
        if (outcome == Outcome::Complete)
            held = complete_job(client, job, ctx.result());
        else
            held = fail_job(client, job, error, fo).has_value();
        if (!held && stopped != StopReason::Shutdown) {
            ++lost;
            log(fmt::format("job {} finished by its handler but no longer ours ({})", job.id,
                            why_not_ours(client, job.id, stopped)));
        }
    });
}

bool Worker::Impl::hand_over(const Job& job, const std::optional<std::string>& result,
                             StopReason stopped) {
    std::lock_guard<std::mutex> lock(m);
    if (!taking_returned) return false;
    returned.push_back({job, result, stopped});
    return true;
}

void Worker::Impl::account(Client& client, const Returned& f, bool held) {
    if (held) {
        ++completed;
    } else if (f.stopped != StopReason::Shutdown) {
        ++lost;
        log(fmt::format("job {} finished by its handler but no longer ours ({})", f.job.id,
                        why_not_ours(client, f.job.id, f.stopped)));
    }
}

// For the log: an operator's cancel is not a fault of the worker, a lost lease may be. A handler
// that returns before the next heartbeat has no stop reason yet, so the job's row is asked.
std::string Worker::Impl::why_not_ours(Client& client, int64_t id, StopReason stopped) {
    if (stopped == StopReason::Cancelled) return "cancelled";
    if (stopped == StopReason::None) {
        try {
            if (client.job_status(id).state == JobState::Cancelled) return "cancelled";
        } catch (const std::exception&) {
            // Gone (a queue that keeps no history) or no connection: nothing more to tell.
        }
    }
    return "lease lost";
}

// Completes at shutdown the jobs handed over to the fetch loop. A lost connection (one killed
// while idle still looks open until it is used) and errors of the moment are met again, as
// report() does for a handler's own report: for up to a minute, never past the shutdown deadline.
// A try cut part-way leaves in `unreported` only the jobs it did not complete, as the fetch loop
// relies on; a completion that committed but whose reply was lost finds its job no longer held.
// Given up, the jobs wait for their leases to run out.
void Worker::Impl::report_unreported(Client* fetcher, internal::Heartbeat& hb, uint64_t begun_by) {
    Backoff backoff(opt.min_backoff, opt.max_backoff);
    const auto give_up_at = Steady::now() + std::chrono::seconds(60);
    while (!unreported.empty()) {
        std::string error;
        bool again = false, lost_connection = false;
        try {
            if (!fetcher) throw std::runtime_error("no connection");
            if (!fetcher->connection().ok()) fetcher->reconnect();
            complete_and_pull(*fetcher, hb, nullptr);
            return;
        } catch (const ConnectionError& ex) {
            error = ex.what();
            again = lost_connection = true;
        } catch (const Error& ex) {
            error = ex.what();
            again = internal::transient(ex);
        } catch (const std::exception& ex) {
            error = ex.what();
        }
        // A second SIGINT/SIGTERM gives up at once, as it hurries the rest of the shutdown.
        const bool hurried = signals_seen() > begun_by;
        const auto until =
            std::min(give_up_at, Steady::time_point(Steady::duration(shutdown_deadline.load())));
        if (!again || hurried || Steady::now() >= until) {
            for (const Returned& f : unreported) {
                log(fmt::format("could not report job {}: {}; its lease will expire", f.job.id,
                                error));
                hb.remove(f.job);
            }
            unreported.clear();
            return;
        }
        // Slept in steps, so that a second signal is seen (a signal handler cannot wake it).
        const auto wake_at = std::min<Steady::time_point>(until, Steady::now() + backoff.next());
        while (Steady::now() < wake_at && signals_seen() <= begun_by)
            std::this_thread::sleep_for(
                std::min<Steady::duration>(kSignalLook, wake_at - Steady::now()));
        if (lost_connection) {
            try {
                fetcher->reconnect();
            } catch (const std::exception&) {
                // Retried on the next round.
            }
        }
    }
}

// Completes the handed-over jobs and, with `po`, pulls the next ones, in one statement: one round
// trip and one commit for all of them. A connection error leaves them for the next turn; any other
// error (a job deleted meanwhile, say) has them completed one by one so that one cannot hold up the
// rest.
std::vector<Job> Worker::Impl::complete_and_pull(Client& conn, internal::Heartbeat& hb,
                                                 const PullOptions* po) {
    if (unreported.empty()) return po ? conn.pull(opt.queue, *po) : std::vector<Job>{};
    std::vector<int64_t> ids, tokens, done;
    std::vector<std::optional<std::string>> results;
    bool any_result = false;
    for (const Returned& f : unreported) {
        ids.push_back(f.job.id);
        tokens.push_back(f.job.lease_token);
        results.push_back(f.result);
        any_result = any_result || f.result.has_value();
    }
    if (!any_result) results.clear();
    std::vector<Job> jobs;
    try {
        if (po)
            jobs = conn.complete_many_and_pull(ids, tokens, results, opt.queue, *po, done);
        else
            done = conn.complete_many(ids, tokens, results);
    } catch (const ConnectionError&) {
        throw;
    } catch (const std::exception& ex) {
        log(fmt::format("completing {} jobs at once failed, one by one instead: {}", ids.size(),
                        ex.what()));
        complete_one_by_one(conn, hb);
        return po ? conn.pull(opt.queue, *po) : std::vector<Job>{};
    }
    hb.remove(ids, tokens);
    std::set<int64_t> held(done.begin(), done.end());
    for (const Returned& f : unreported) account(conn, f, held.count(f.job.id) > 0);
    unreported.clear();
    return jobs;
}

// The batch's jobs, each in a statement of its own. An error of the moment (a deadlock with an
// operator's cancel, a lock timeout) is met again within the minute and the shutdown deadline, as
// report() does for a handler's own report; a lost connection leaves the jobs not yet completed
// for the next turn, as it does a whole batch. Given up, a job waits for its lease to run out.
void Worker::Impl::complete_one_by_one(Client& conn, internal::Heartbeat& hb) {
    Backoff backoff(opt.min_backoff, opt.max_backoff);
    auto give_up_at = Steady::now() + std::chrono::seconds(60);
    auto done = unreported.begin();
    try {
        while (done != unreported.end()) {
            const Returned& f = *done;
            try {
                if (!complete_job(conn, f.job, f.result)) account(conn, f, false);
            } catch (const ConnectionError&) {
                throw;
            } catch (const Error& e) {
                auto until = std::min(
                    give_up_at, Steady::time_point(Steady::duration(shutdown_deadline.load())));
                if (internal::transient(e) && Steady::now() < until) {
                    std::this_thread::sleep_for(
                        std::min<Steady::duration>(backoff.next(), until - Steady::now()));
                    continue;
                }
                log(fmt::format("could not report job {}: {}", f.job.id, e.what()));
            } catch (const std::exception& e) {
                log(fmt::format("could not report job {}: {}", f.job.id, e.what()));
            }
            hb.remove(f.job);
            ++done;
        }
    } catch (...) {
        unreported.erase(unreported.begin(), done);
        throw;
    }
    unreported.clear();
}

// Completes the job. A completion the server refuses for its data (a result that is not JSON, or
// holds a \u0000) would be refused again each time: the job fails with the reason instead, rather
// than stay running until its lease runs out and be run again. false: no longer ours.
bool Worker::Impl::complete_job(Client& client, const Job& job,
                                const std::optional<std::string>& result) {
    try {
        if (!client.complete(job.id, job.lease_token, result)) return false;
        ++completed;
        return true;
    } catch (const ConnectionError&) {
        throw;
    } catch (const Error& e) {
        if (!internal::refused_data(e)) throw;
        return fail_job(client, job, std::string("invalid result: ") + e.what(), {}).has_value();
    }
}

// Fails the job. When the server refuses the failure itself (an error text or delay it does not
// accept), it is recorded again with a plain text and the queue's backoff, so that the attempt
// counts and the handler's error is kept.
std::optional<JobState> Worker::Impl::fail_job(Client& client, const Job& job, std::string error,
                                               FailOptions fo) {
    std::optional<JobState> now;
    try {
        now = client.fail(job.id, job.lease_token, error, fo);
    } catch (const ConnectionError&) {
        throw;
    } catch (const Error& e) {
        if (!internal::refused_data(e)) throw;
        log(fmt::format("job {}: its failure was refused ({}); recorded with the queue's backoff",
                        job.id, e.what()));
        internal::make_plainer(error, fo);
        now = client.fail(job.id, job.lease_token, error, fo);
    }
    if (now) {
        ++failed;
        // Operators read failures here; completions are too many to be worth a line.
        log(fmt::format("job {} ({}) failed, now {}: {}", job.id, job.kind.value_or("no kind"),
                        to_string(*now), error));
    }
    return now;
}

void Worker::Impl::report(Client& client, const Job& job, const std::function<void()>& run) {
    Backoff backoff(opt.min_backoff, opt.max_backoff);
    // Connection trouble (a server restart) and errors of the moment (a deadlock, a lock
    // timeout) are retried for a while; any other error is final. Past that, the lease runs out
    // and the job is retried elsewhere, its handler's outcome lost.
    auto give_up_at = Steady::now() + std::chrono::seconds(60);
    // false: give up.
    auto pause = [&](const std::exception& ex) {
        auto until =
            std::min(give_up_at, Steady::time_point(Steady::duration(shutdown_deadline.load())));
        if (Steady::now() >= until) {
            log(fmt::format("could not report job {}: {}; its lease will expire", job.id,
                            ex.what()));
            return false;
        }
        std::this_thread::sleep_for(
            std::min<Steady::duration>(backoff.next(), until - Steady::now()));
        return true;
    };
    while (true) {
        try {
            run();
            return;
        } catch (const ConnectionError& ex) {
            if (!pause(ex)) return;
            try {
                client.reconnect();
            } catch (const std::exception&) {
                // Retried on the next round.
            }
        } catch (const Error& ex) {
            if (!internal::transient(ex)) {
                log(fmt::format("could not report job {}: {}", job.id, ex.what()));
                return;
            }
            if (!pause(ex)) return;
        } catch (const std::exception& ex) {
            log(fmt::format("could not report job {}: {}", job.id, ex.what()));
            return;
        }
    }
}

}  // namespace hopper
