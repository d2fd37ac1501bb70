// TakeWorker: N threads, each taking jobs in a transaction of its own connection and running
// their handlers inside it; an idle thread waits in its take, in the server, for jobs to arrive
// (or, listening, the calling thread LISTENs and wakes idle threads). At shutdown the calling
// thread cancels the waiting takes and ends the transactions that outlive the deadline.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "backoff.hpp"
#include "deadline.hpp"
#include "handler_failure.hpp"
#include "hopper/utf8.hpp"
#include "hopper/take_worker.hpp"
#include "joined_threads.hpp"
#include "option_checks.hpp"
#include "run_state.hpp"
#include "signals.hpp"
#include "wakeup.hpp"
#include "worker_client.hpp"
#include "worker_name.hpp"

namespace hopper {

using internal::Backoff;
using Steady = std::chrono::steady_clock;

namespace {

// A take the server refused the way it would refuse it every time (internal::refused_for_good):
// retried, it would be refused forever without taking a job.
struct RefusedTake : std::runtime_error {
    explicit RefusedTake(const Error& e)
        : std::runtime_error(e.what()), error(std::current_exception()) {}
    std::exception_ptr error;  // the server's, thrown by run()
};

}  // namespace

struct TakeWorker::Impl {
    TakeWorkerOptions opt;
    std::map<std::string, TakeHandler> handlers;
    TakeHandler fallback;
    TakeOptions take;  // what every take asks for

    std::atomic<bool> stop_requested{false};
    internal::RunState run_state;
    std::atomic<bool> listening{false};  // LISTEN + poll instead of waiting takes
    // The server's error for a take refused for good (RefusedTake), which run() throws; under m.
    std::exception_ptr refusal;
    internal::Wakeup wake;

    std::mutex m;
    std::condition_variable arrived;  // jobs may have arrived, or the worker is stopping
    uint64_t generation = 0;          // bumped by each wake-up; guarded by m

    // The transaction each taker thread has open with jobs in it, so that a shutdown past its
    // deadline can end it from the server, and the take it may be waiting in, so that a shutdown
    // can cancel it. Guarded by m.
    struct Slot {
        // Its server process (Connection::server_pid: behind a pooler not the pid the connection
        // announced, and the transaction's only); 0 while the thread holds no jobs, and from the
        // moment it ends its transaction.
        int pid = 0;
        size_t jobs = 0;
        bool ended = false;   // the shutdown deadline ends it (or ended it)
        bool closed = false;  // ...and its thread dropped its connection meanwhile
        // Set while a waiting take is (or may be) running.
        std::optional<Connection::Canceller> waiting;
        bool cancelled = false;  // a cancel was sent to that take
        // A cancel to that take is on its way (sent outside the lock): the mark is not cleared
        // until it has been answered.
        bool cancelling = false;
    };
    class Holding;
    class Waiting;
    std::vector<Slot> slots;
    std::condition_variable settled;       // a transaction that held jobs has finished
    std::condition_variable cancels_sent;  // the cancels being sent have been answered

    std::atomic<uint64_t> completed{0}, failed{0}, released{0}, takes{0};

    explicit Impl(TakeWorkerOptions o) : opt(std::move(o)) {
        if (opt.concurrency < 1) throw std::invalid_argument("concurrency must be at least 1");
        if (opt.batch < 1) throw std::invalid_argument("batch must be at least 1");
        if (opt.gather.count() < 0 || opt.gather > std::chrono::seconds(1))
            throw std::invalid_argument("gather must be between 0 and 1 s");
        internal::check_worker_options(opt.queue, opt.name, opt.poll_interval, opt.poll_jitter,
                                       opt.shutdown_timeout);
        if (opt.name.empty()) opt.name = internal::default_worker_name();
        if (!opt.log)
            opt.log = [](const std::string& msg) {
                std::cerr << "hopper take worker: " << msg << std::endl;
            };
        opt.log = internal::guarded_log(std::move(opt.log));
    }

    // Set by run() before its threads start and reset after they end, when it handles signals.
    std::optional<internal::SignalWatch> signals;

    bool stopping() const { return stop_requested.load() || (signals && signals->received()); }
    uint64_t signals_seen() const { return signals ? signals->count() : 0; }

    void log_line(const std::string& msg) const { opt.log(msg); }

    void wake_all() {
        {
            std::lock_guard<std::mutex> lock(m);
            ++generation;
        }
        arrived.notify_all();
    }

    // Sleeps until a wake-up newer than `seen`, stop(), or `timeout`.
    void idle(uint64_t seen, Duration timeout) {
        std::unique_lock<std::mutex> lock(m);
        arrived.wait_until(lock, internal::deadline_after(timeout),
                           [&] { return stopping() || generation != seen; });
    }

    uint64_t current_generation() {
        std::lock_guard<std::mutex> lock(m);
        return generation;
    }

    const TakeHandler& handler_for(const Job& job) const {
        if (job.kind) {
            auto it = handlers.find(*job.kind);
            if (it != handlers.end()) return it->second;
        }
        return fallback;  // set: without it, only the handlers' kinds are taken
    }

    void give_up(const RefusedTake& refused);
    void listen_loop();
    void cancel_waiting_takes();
    void take_loop(size_t slot);
    size_t take_once(Client& client, size_t slot, std::optional<Duration> wait);
    bool ended_by_deadline(size_t slot);
    void end_overdue_transactions(uint64_t begun_by);
    void record_failure(Client& client, const Job& job, const std::string& error,
                        const FailOptions& fo);
    std::optional<JobState> fail_taken(Client& client, const Job& job,
                                       internal::HandlerFailure& failure);
};

// Marks a taker's slot while its transaction holds jobs. When the shutdown deadline ended that
// transaction before the worker could finish it, its jobs count as released.
class TakeWorker::Impl::Holding {
  public:
    Holding(Impl& w, size_t slot, int pid, size_t jobs) : w_(w), slot_(slot) {
        std::lock_guard<std::mutex> lock(w_.m);
        Slot& s = w_.slots[slot_];
        s.pid = pid;
        s.jobs = jobs;
        s.ended = false;
        s.closed = false;
    }
    Holding(const Holding&) = delete;
    Holding& operator=(const Holding&) = delete;
    ~Holding() {
        {
            std::lock_guard<std::mutex> lock(w_.m);
            Slot& s = w_.slots[slot_];
            if (s.ended && !finished_) w_.released += s.jobs;
            s.pid = 0;  // `ended` stays set for the thread's error handling
        }
        w_.settled.notify_all();
    }
    // Called before the thread ends its transaction (COMMIT, or ROLLBACK after an error): takes
    // the server pid back, so that the shutdown deadline cannot end that session once the
    // transaction is over (behind a pooler it may be another client's by then). When the deadline
    // took it first, its pg_terminate_backend may still be on its way: the connection is dropped
    // instead, without ending the transaction, which the server then rolls back. false then.
    bool withdraw(Connection& connection) {
        std::lock_guard<std::mutex> lock(w_.m);
        Slot& s = w_.slots[slot_];
        if (!s.ended) {
            s.pid = 0;
            return true;
        }
        if (connection.ok()) connection.close();
        s.closed = true;
        return false;
    }
    // The jobs' outcome is settled: committed, or their failures recorded.
    void finished() { finished_ = true; }

  private:
    Impl& w_;
    size_t slot_;
    bool finished_ = false;
};

// Marks a taker's slot while its take may be waiting in the server, so that a shutdown can cancel
// it. The mark is not cleared while a cancel to it is on its way (PQcancel: directly, the server
// has signalled the take when it returns), so a cancel can only reach the waiting take, never the
// statements after it. The cancel is sent outside the lock: PQcancel waits for the server's
// answer, for as long as a host that stopped answering takes, and stop() or the other threads
// need the lock meanwhile. Through a pooler the cancel may
// arrive later, within the same transaction: a take cancelled that returns jobs all the same is
// rolled back (see take_once), so that the cancel cannot fail one of their handlers.
class TakeWorker::Impl::Waiting {
  public:
    Waiting(Impl& w, size_t slot, Connection::Canceller canceller) : w_(w), slot_(slot) {
        std::lock_guard<std::mutex> lock(w_.m);
        refused_ = w_.stopping();  // checked under the lock: no take starts after the cancels
        Slot& s = w_.slots[slot_];
        s.cancelled = false;
        if (!refused_) s.waiting = std::move(canceller);
    }
    Waiting(const Waiting&) = delete;
    Waiting& operator=(const Waiting&) = delete;
    ~Waiting() { clear(); }
    bool refused() const { return refused_; }
    // Ends the mark; whether a cancel was sent to the take.
    bool clear() {
        std::unique_lock<std::mutex> lock(w_.m);
        Slot& s = w_.slots[slot_];
        w_.cancels_sent.wait(lock, [&] { return !s.cancelling; });
        s.waiting.reset();
        return s.cancelled;
    }

  private:
    Impl& w_;
    size_t slot_;
    bool refused_ = false;
};

TakeWorker::TakeWorker(TakeWorkerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
// run() in another thread uses everything destroyed here: it is stopped and waited for first.
TakeWorker::~TakeWorker() {
    impl_->run_state.stop_and_wait([this] { stop(); });
}

TakeWorker& TakeWorker::on(const std::string& kind, TakeHandler handler) {
    impl_->handlers[kind] = std::move(handler);
    return *this;
}

TakeWorker& TakeWorker::on_any(TakeHandler handler) {
    impl_->fallback = std::move(handler);
    return *this;
}

void TakeWorker::stop() {
    impl_->stop_requested.store(true);
    impl_->wake.notify();
    impl_->wake_all();
}

WorkerStats TakeWorker::stats() const {
    return {impl_->completed.load(), impl_->failed.load(), 0, impl_->released.load(),
            impl_->takes.load()};
}

void TakeWorker::run() {
    Impl& w = *impl_;
    if (w.handlers.empty() && !w.fallback)
        throw std::logic_error("TakeWorker::run: no handler registered");
    // The last of run(): a waiting ~TakeWorker may destroy w once it is done.
    internal::RunState::Scope run_scope(w.run_state, "TakeWorker::run is already running");
    w.take = TakeOptions{};
    w.take.n = w.opt.batch;
    w.take.worker = w.opt.name;
    if (!w.fallback)
        for (const auto& [kind, _] : w.handlers) w.take.kinds.push_back(kind);
    if (w.opt.handle_signals) w.signals.emplace(w.wake);
    struct Unwatch {  // declared before the threads, so it runs after they are joined
        std::optional<internal::SignalWatch>& signals;
        ~Unwatch() { signals.reset(); }
    } unwatch{w.signals};
    w.slots.assign(static_cast<size_t>(w.opt.concurrency), Impl::Slot{});
    w.listening.store(!w.opt.waiting_takes);
    internal::JoinedThreads threads([&w] {
        // The signals that began the shutdown: one, or none when stop() did. Any after it ends
        // the open transactions at once, as the deadline would.
        const uint64_t begun_by = std::min<uint64_t>(w.signals_seen(), 1);
        w.stop_requested.store(true);  // already, unless the listen loop ended by an exception
        w.wake_all();  // the takers see stopping() and end after their current transaction
        w.cancel_waiting_takes();
        w.end_overdue_transactions(begun_by);
    });
    for (size_t i = 0; i < w.slots.size(); ++i) threads.start([&w, i] { w.take_loop(i); });
    w.listen_loop();
    threads.join();
    if (w.refusal) std::rethrow_exception(w.refusal);
}

// Turns NOTIFYs on "hopper:<queue>" (and poll ticks) into wake-ups of idle takers.
void TakeWorker::Impl::listen_loop() {
    const std::string channel = "hopper:" + opt.queue;
    Backoff backoff(opt.min_backoff, opt.max_backoff);
    std::unique_ptr<Client> conn;
    while (!stopping()) {
        if (!listening.load()) {
            // The takers wait in the server; this thread only waits for stop() or a fallback.
            wake.wait(std::chrono::seconds(1));
            wake.drain();
            continue;
        }
        try {
            if (!conn) {
                conn = internal::worker_client(opt.conninfo);
                conn->connection().listen(channel);
                wake_all();  // jobs may have arrived while nobody listened
            } else if (!conn->connection().ok()) {
                conn->reconnect();
                conn->connection().listen(channel);
                wake_all();
            }
            Duration wait = internal::listen_poll(opt.poll_interval, opt.poll_jitter);
            bool woke = conn->connection().wait(
                std::chrono::duration_cast<std::chrono::milliseconds>(wait), wake.fd());
            wake.drain();
            bool notified = !conn->connection().notifications().empty();
            if (notified || !woke) wake_all();
            backoff.reset();
        } catch (const std::exception& ex) {
            Duration d = backoff.next();
            log_line(fmt::format("listening on {} failed (retrying in {} ms): {}", channel,
                                 d.count() / 1000, ex.what()));
            wake_all();  // the takers poll meanwhile
            idle(current_generation(), d);
        }
    }
}

// Waits up to shutdown_timeout for the transactions holding jobs (or until a second signal),
// then terminates the sessions of those still open: the server rolls them back, so their jobs
// are available again at once instead of when their handlers return.
void TakeWorker::Impl::end_overdue_transactions(uint64_t begun_by) {
    std::vector<std::pair<size_t, int>> open;  // slot, server pid
    bool hurried = false;
    {
        const auto deadline = internal::deadline_after(opt.shutdown_timeout);
        std::unique_lock<std::mutex> lock(m);
        auto none_open = [&] {
            return std::none_of(slots.begin(), slots.end(),
                                [](const Slot& s) { return s.pid != 0; });
        };
        // A signal handler cannot notify a condition variable: with signals handled, the wait
        // looks at their count every 100 ms.
        while (!none_open() && !(hurried = signals_seen() > begun_by)) {
            auto now = Steady::now();
            if (now >= deadline) break;
            auto until = signals ? std::min<Steady::time_point>(
                                       deadline, now + std::chrono::milliseconds(100))
                                 : deadline;
            settled.wait_until(lock, until, none_open);
        }
        if (none_open()) return;
        // Marked before the terminate, so that a thread that sees its connection end knows why,
        // and one about to end its transaction drops its connection instead (Holding::withdraw).
        for (size_t i = 0; i < slots.size(); ++i)
            if (slots[i].pid != 0) {
                slots[i].ended = true;
                open.emplace_back(i, slots[i].pid);
            }
    }
    // Not under the lock: behind a pooler the statement may wait for a server connection, which
    // a thread about to take the lock may hold.
    std::vector<bool> terminated(open.size(), false);
    std::string error;
    try {
        Client admin(opt.conninfo);
        for (size_t i = 0; i < open.size(); ++i)
            terminated[i] = admin.exec("SELECT pg_catalog.pg_terminate_backend($1)", open[i].second)
                                .boolean(0, 0);
    } catch (const std::exception& ex) {
        error = ex.what();
    }
    size_t ended = 0;
    std::string missed;
    {
        std::lock_guard<std::mutex> lock(m);
        for (size_t i = 0; i < open.size(); ++i) {
            Slot& s = slots[open[i].first];
            if (terminated[i] || s.closed) {
                ++ended;
            } else {
                // Not ended: the thread goes on and settles its jobs itself.
                s.ended = false;
                missed += (missed.empty() ? "" : ", ") + std::to_string(open[i].second);
            }
        }
    }
    const char* why = hurried ? "second signal during shutdown" : "shutdown deadline passed";
    if (ended > 0)
        log_line(
            fmt::format("{}: ended {} open transaction(s), their jobs are available", why, ended));
    if (!missed.empty())
        log_line(fmt::format(
            "{}, but {} open transaction(s) could not be ended (server process {}: {}); their "
            "handlers go on",
            why, open.size() - ended, missed,
            error.empty() ? "no such process, or no right to end it" : error));
}

bool TakeWorker::Impl::ended_by_deadline(size_t slot) {
    std::lock_guard<std::mutex> lock(m);
    return slots[slot].ended;
}

// Cancels the takes still waiting in the server, so that a shutdown does not wait for their wait
// to run out. Repeated until none is left: a cancel that reaches a session before its take
// arrives is ignored by the server. A cancel goes to the take's own connection (PQcancel), not
// through a session of its own: it needs no server connection of a pooler, and PgBouncer
// forwards it to the server session that runs the take.
void TakeWorker::Impl::cancel_waiting_takes() {
    // A waiting take waits at most 30 s (server_wait).
    auto give_up_at = Steady::now() + std::chrono::seconds(35);
    while (Steady::now() < give_up_at) {
        // Copied under the lock and sent outside it; the takes' marks stay until every cancel
        // has been answered (Waiting::clear), also when one throws.
        std::vector<Connection::Canceller> cancels;
        struct Answered {
            Impl& w;
            ~Answered() {
                {
                    std::lock_guard<std::mutex> lock(w.m);
                    for (Slot& s : w.slots) s.cancelling = false;
                }
                w.cancels_sent.notify_all();
            }
        };
        {
            std::lock_guard<std::mutex> lock(m);
            for (Slot& s : slots) {
                if (!s.waiting) continue;
                cancels.push_back(*s.waiting);
                s.cancelling = true;
                s.cancelled = true;
            }
        }
        if (cancels.empty()) return;
        {
            Answered answered{*this};
            // A request that could not be sent is sent again on the next round.
            for (const Connection::Canceller& c : cancels) c.cancel();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    log_line("could not cancel the waiting takes; they end when their wait runs out");
}

// Stops the worker (the other threads finish the transaction they are in), and has run() throw
// the server's error: the first refusal is logged, the other threads' are the same.
void TakeWorker::Impl::give_up(const RefusedTake& refused) {
    bool first;
    {
        std::lock_guard<std::mutex> lock(m);
        first = !refusal;
        if (first) refusal = refused.error;
    }
    if (first)
        log_line(fmt::format("taking from queue {} was refused, the worker stops: {}", opt.queue,
                             refused.what()));
    stop_requested.store(true);
    wake.notify();
    wake_all();
}

void TakeWorker::Impl::take_loop(size_t slot) {
    Backoff backoff(opt.min_backoff, opt.max_backoff);
    std::unique_ptr<Client> client;
    while (!stopping()) {
        uint64_t seen = current_generation();
        std::optional<Duration> wait;
        try {
            if (!client)
                client = internal::worker_client(opt.conninfo);
            else if (!client->connection().ok())
                client->reconnect();
            auto started = Steady::now();
            if (!listening.load()) wait = internal::server_wait(opt.poll_interval, opt.poll_jitter);
            size_t got = take_once(*client, slot, wait);
            backoff.reset();
            if (got > 0) continue;  // probably more where these came from
            // A waiting take that ran its course looks again at once; one that could not wait
            // (or a listening worker) sleeps until woken or the next poll.
            if (wait && Steady::now() - started >= *wait / 2) continue;
            idle(seen, internal::listen_poll(opt.poll_interval, opt.poll_jitter));
        } catch (const RefusedTake& refused) {
            give_up(refused);
            break;
        } catch (const std::exception& ex) {
            if (ended_by_deadline(slot)) break;  // reported when it was ended
            if (stopping()) break;               // a waiting take cancelled by the shutdown
            const auto* err = dynamic_cast<const Error*>(&ex);
            if (err && err->sqlstate() == sqlstate::kQueryCanceled && wait && client &&
                internal::statement_timeout_cuts(*client, *wait) && !listening.exchange(true)) {
                // This role cannot wait in the server. (An operator's cancel is retried below.)
                log_line(
                    fmt::format("waiting take on queue {} ended by statement_timeout ({}); "
                                "listening instead",
                                opt.queue, ex.what()));
                wake.notify();  // the calling thread starts listening
                continue;
            }
            // A lost connection or a refusal of the moment: nothing was taken, or the
            // transaction rolled back and its jobs are available again.
            Duration d = backoff.next();
            log_line(fmt::format("taking from queue {} failed (retrying in {} ms): {}", opt.queue,
                                 d.count() / 1000, ex.what()));
            idle(seen, d);
        }
    }
}

// One transaction: take, run the handlers after a savepoint, commit. When a handler throws, the
// work of the take is rolled back to the savepoint and that job's failure recorded right there, in
// the taking transaction, so the job never leaves this worker's hands before its attempt counts;
// then the other jobs' handlers run again from the start. One savepoint per take (and one more
// per failure) instead of one per job: a savepoint costs a round trip, which the jobs of a batch
// would otherwise each pay. Returns how many jobs it took.
size_t TakeWorker::Impl::take_once(Client& client, size_t slot, std::optional<Duration> wait) {
    std::optional<Holding> holding;
    Transaction tx(client);
    auto take_jobs = [&](const TakeOptions& options) {
        try {
            return client.take(opt.queue, options);
        } catch (const ConnectionError&) {
            throw;
        } catch (const Error& e) {
            if (internal::refused_for_good(e)) throw RefusedTake(e);
            throw;
        }
    };
    std::vector<Job> jobs;
    if (wait) {
        TakeOptions waiting = take;
        waiting.wait = wait;
        Waiting mark(*this, slot, client.connection().canceller());
        if (!mark.refused()) jobs = take_jobs(waiting);
        if (mark.clear() && !jobs.empty()) {
            // The shutdown cancelled this take, which returned jobs all the same: they go back
            // untouched, before a cancel still on its way through a pooler can fail a handler.
            tx.rollback();
            return 0;
        }
    } else {
        jobs = take_jobs(take);
    }
    if (opt.gather.count() > 0 && !jobs.empty() && static_cast<int>(jobs.size()) < take.n) {
        std::this_thread::sleep_for(opt.gather);
        TakeOptions more = take;
        more.n = take.n - static_cast<int>(jobs.size());
        // A waiting take judges "due" by the clock at each look; a plain one by its transaction's
        // start, before which the jobs gathered here were pushed.
        more.wait = std::chrono::milliseconds(1);
        for (Job& j : take_jobs(more)) jobs.push_back(std::move(j));
    }
    if (jobs.empty()) {
        tx.commit();
        return 0;
    }
    holding.emplace(*this, slot, client.connection().server_pid(), jobs.size());
    ++takes;
    // Each failed job's failure as recorded (made plainer if the server refused it as it was),
    // to be recorded again should the COMMIT fail and roll it back.
    std::vector<std::optional<internal::HandlerFailure>> failed_with(jobs.size());
    std::vector<std::string> failures;
    // Until the transaction ends, an error leaves it to tx's rollback, which must not come
    // before the slot's pid is withdrawn.
    struct Withdraw {
        std::optional<Holding>& holding;
        Connection& connection;
        bool done = false;
        ~Withdraw() {
            if (!done) holding->withdraw(connection);
        }
    } withdraw{holding, client.connection()};
    // A handler ended the take's transaction (a COMMIT or ROLLBACK of its own), or the savepoint
    // with it: its job fails, as a Worker's handler that leaves a transaction open does. The rest
    // of the take is rolled back and the failure recorded after it, so that the job is not taken
    // again at once for ever, nor completed by a commit that the handler's failure would follow.
    auto broken = [&](const Job& job, internal::HandlerFailure failure, const char* what) {
        withdraw.done = true;
        if (!holding->withdraw(client.connection()))
            throw ConnectionError("the shutdown deadline ended the transaction");
        tx.rollback();
        failure.error = failure.error.empty() ? what : std::string(what) + "; " + failure.error;
        std::optional<JobState> now =
            client.fail_taken(job.id, failure.error, failure.options, opt.name);
        holding->finished();
        if (now) {
            ++failed;
            log_line(fmt::format("job {} ({}) failed, now {}: {}", job.id,
                                 job.kind.value_or("no kind"), to_string(*now), failure.error));
        } else {
            // No longer the take's to fail: most likely a COMMIT of the handler's own, which
            // committed the take and completed its jobs whatever their handlers did (not counted
            // as completions); or, after a ROLLBACK of its own, another worker took the job first.
            log_line(
                fmt::format("job {} ({}): {}; its failure could not be recorded: a COMMIT "
                            "of the handler's own completed the take's {} job(s), or another "
                            "worker took it after a ROLLBACK",
                            job.id, job.kind.value_or("no kind"), what, jobs.size()));
        }
        return jobs.size();
    };
    constexpr const char* kEnded =
        "the handler ended the transaction it runs in (a COMMIT or ROLLBACK of its own)";
    for (;;) {
        client.exec("SAVEPOINT hopper_take");  // nested after each failure, which it keeps
        std::optional<size_t> failing;
        internal::HandlerFailure failure;
        for (size_t i = 0; i < jobs.size() && !failing; ++i) {
            if (failed_with[i]) continue;
            try {
                handler_for(jobs[i])(jobs[i], client);
            } catch (const ConnectionError&) {
                // Only a lost taking connection means the server rolled the take back. The
                // handler's own connection to some other service (or a dblink on this one)
                // failing is that job's failure: rethrown, the take would roll back and take the
                // job again for ever, its attempt never counted, its batch never committed.
                if (!client.connection().ok()) throw;
                failure = internal::handler_failure(std::current_exception());
                failing = i;
            } catch (...) {
                failure = internal::handler_failure(std::current_exception());
                failing = i;
            }
            if (client.connection().ok() && !client.connection().in_transaction())
                return broken(jobs[i], failing ? failure : internal::HandlerFailure{}, kEnded);
        }
        if (!failing) break;
        const Job& job = jobs[*failing];
        try {
            client.exec("ROLLBACK TO SAVEPOINT hopper_take");
        } catch (const ConnectionError&) {
            throw;
        } catch (const Error& e) {
            // 3B001: a handler released the savepoint, or rolled back past it. Anything else (a
            // cancel, say) is not the handler's doing and goes up as any other error would.
            if (e.sqlstate() != "3B001") throw;
            return broken(job, failure,
                          "a handler ended the savepoint hopper_take that the worker rolls back "
                          "to after a failure");
        }
        std::optional<JobState> now = fail_taken(client, job, failure);
        if (now)
            failures.push_back(fmt::format("job {} ({}) failed, now {}: {}", job.id,
                                           job.kind.value_or("no kind"), to_string(*now),
                                           failure.error));
        failed_with[*failing] = std::move(failure);
    }
    withdraw.done = true;
    if (!holding->withdraw(client.connection()))
        throw ConnectionError("the shutdown deadline ended the transaction");
    try {
        tx.commit();
    } catch (const ConnectionError&) {
        throw;
    } catch (const std::exception& e) {
        // The handlers' SQL could not commit (a deferred constraint, a serialization failure):
        // the rollback undid the failures recorded in the take too, and every job is available
        // again. A job whose handler failed is failed again as its handler asked (its error,
        // RetryIn, PermanentFailure): its work was already undone, so the COMMIT's failure is
        // not its own. The others fail with the COMMIT's error.
        const std::string error = valid_utf8(std::string("commit failed: ") + e.what());
        for (size_t i = 0; i < jobs.size(); ++i) {
            if (failed_with[i])
                record_failure(client, jobs[i], failed_with[i]->error, failed_with[i]->options);
            else
                record_failure(client, jobs[i], error, {});
        }
        holding->finished();
        return jobs.size();
    }
    holding->finished();
    completed += jobs.size() - failures.size();
    failed += failures.size();
    for (const std::string& line : failures) log_line(line);
    return jobs.size();
}

// Records a handler's failure in the taking transaction, just after rolling back to the
// savepoint. Should the server refuse it, the transaction would roll back whole, the good jobs'
// work with it, and the job be taken again with no attempt counted, for ever: the failure is
// recorded again after the same savepoint (made after the failures recorded before), with a
// plain text and the queue's backoff.
std::optional<JobState> TakeWorker::Impl::fail_taken(Client& client, const Job& job,
                                                     internal::HandlerFailure& failure) {
    try {
        return client.fail_taken(job.id, failure.error, failure.options, opt.name);
    } catch (const ConnectionError&) {
        throw;
    } catch (const Error& e) {
        if (!internal::refused_data(e)) throw;
        client.exec("ROLLBACK TO SAVEPOINT hopper_take");
        log_line(
            fmt::format("job {}: its failure was refused ({}); recorded with the queue's "
                        "backoff",
                        job.id, e.what()));
        internal::make_plainer(failure.error, failure.options);
        return client.fail_taken(job.id, failure.error, failure.options, opt.name);
    }
}

void TakeWorker::Impl::record_failure(Client& client, const Job& job, const std::string& error,
                                      const FailOptions& fo) {
    std::optional<JobState> now = client.fail_taken(job.id, error, fo, opt.name);
    if (!now) return;  // another taker finished it meanwhile
    ++failed;
    log_line(fmt::format("job {} ({}) failed, now {}: {}", job.id, job.kind.value_or("no kind"),
                         to_string(*now), error));
}

}  // namespace hopper
