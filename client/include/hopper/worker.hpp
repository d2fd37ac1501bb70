// The worker runtime: pulls jobs from one queue and runs handlers by kind on N threads.
//
//   hopper::WorkerOptions opt;
//   opt.queue = "emails";
//   opt.concurrency = 4;
//   hopper::Worker worker(opt);
//   worker.on("welcome", [](hopper::JobContext& job) {
//       send_welcome(job.payload());
//       job.set_result(R"({"sent": true})");
//   });
//   worker.run();  // until SIGINT/SIGTERM or worker.stop()
//
// A handler that returns completes the job; one that throws fails it with the exception's text
// (retried with the queue's backoff); RetryIn and PermanentFailure say how to fail instead.
// Running jobs, and jobs claimed ahead and held locally (WorkerOptions::prefetch), are heartbeated
// every lease/3; when a heartbeat says the job is no longer ours (lease lost, or cancelled by an
// operator) a held job is dropped unstarted, and a running job's stop flag is raised and its
// on_stop callbacks run (on a thread of their own), and the handler should return soon: whatever
// it then reports is ignored by the server.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "hopper/client.hpp"
#include "hopper/types.hpp"

namespace hopper {

// Thrown by a handler: fail this attempt and retry after `delay` (counts as an attempt).
class RetryIn : public std::runtime_error {
  public:
    explicit RetryIn(Duration delay, const std::string& message = "retry requested")
        : std::runtime_error(message), delay_(delay) {}
    template <typename Rep, typename Period>
    explicit RetryIn(std::chrono::duration<Rep, Period> delay,
                     const std::string& message = "retry requested")
        : RetryIn(std::chrono::duration_cast<Duration>(delay), message) {}
    Duration delay() const { return delay_; }

  private:
    Duration delay_;
};

// Thrown by a handler: the job can never succeed; it goes to dead without further attempts.
class PermanentFailure : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// Why a running job was told to stop.
enum class StopReason {
    None,
    Lost,       // the lease expired and another worker took the job, or it was released
    Cancelled,  // an operator cancelled it (queue_cancel)
    Shutdown,   // the worker is shutting down and the deadline passed: the job is released when
                // the handler returns
};
std::string_view to_string(StopReason r);

// What a handler sees of its job. progress(), the stop methods and on_stop() may be called from any
// thread; the rest from the handler's own thread (they use its connection).
class JobContext {
  public:
    using ProgressSink = std::function<bool(double, const std::optional<std::string>&)>;
    // `client`: the handler's connection; `report_progress` records progress for this job (the
    // runtime sends it on its control connection, so it never races the handler's own SQL).
    JobContext(const Job& job, Client& client, ProgressSink report_progress);
    JobContext(const JobContext&) = delete;
    JobContext& operator=(const JobContext&) = delete;

    const Job& job() const { return job_; }
    int64_t id() const { return job_.id; }
    const std::string& payload() const { return job_.payload; }
    const std::optional<std::string>& kind() const { return job_.kind; }
    int attempt() const { return job_.attempt; }

    // Records progress (0..1) and optional JSON detail. false: the job is no longer ours.
    // (A context built without a progress sink reports on client(), from the handler's thread.)
    bool progress(double fraction, const std::optional<std::string>& detail = {});

    bool stop_requested() const { return stop_reason() != StopReason::None; }
    StopReason stop_reason() const;
    // Sleeps up to `timeout`, waking early when a stop is requested; true if stopped.
    bool wait_for_stop(Duration timeout);
    // Runs `fn` once when a stop is requested, or right away (on the caller's thread) if it
    // already was. Use it to kill a child process. The worker runs the callbacks of all its jobs
    // in turn on a thread of their own, holding none of its locks: one that runs long delays the
    // next job's callbacks, but no heartbeat, pull or report, and it may call back into the
    // worker. It runs just after the stop flag is raised, so it may run after the handler has
    // returned: capture what it needs by value (a shared_ptr), not the handler's locals by
    // reference. An exception it throws is logged.
    void on_stop(std::function<void(StopReason)> fn);

    // JSON stored as the job's result when the handler returns normally.
    void set_result(std::string json) { result_ = std::move(json); }

    // Completes the job now, in one transaction with the handler's own SQL:
    //   job.complete_with([&](hopper::Client& c) { c.exec("UPDATE videos SET ...", id); }, res);
    // Returns false (and rolls the transaction back) when the job is no longer ours.
    bool complete_with(const std::function<void(Client&)>& in_transaction,
                       const std::optional<std::string>& result = {});

    // Fails the job now, in one transaction with the handler's own SQL, which learns the job's
    // new state (Available or Scheduled: it will be retried; Dead: it will not):
    //   job.fail_with("ffmpeg: invalid data", {}, [&](hopper::Client& c, hopper::JobState s) {
    //       if (s == hopper::JobState::Dead) c.exec("UPDATE videos SET status = 'failed' ...");
    //   });
    // Returns nullopt (and rolls back) when the job is no longer ours.
    std::optional<JobState> fail_with(const std::string& error, const FailOptions& options,
                                      const std::function<void(Client&, JobState)>& in_transaction);

    // Gives the job back for another worker to run now, without using up an attempt (e.g. this
    // machine lacks a resource the job needs). false when the job is no longer ours.
    bool release();

    // This worker thread's own connection, for the handler's SQL. Use it from the handler's
    // thread only (progress() may be called from anywhere).
    Client& client() { return client_; }

    // Runtime side: raising the stop flag, and whether the handler already finished the job.
    enum class Finished { No, Completed, Failed, Released };
    // Raises the stop flag and runs the on_stop callbacks.
    void request_stop(StopReason reason);
    // Raises the stop flag and returns the on_stop callbacks, bound to `reason`, for the caller to
    // run outside its own locks: none if the flag was raised already.
    std::vector<std::function<void()>> raise_stop(StopReason reason);
    bool finished() const { return finished_ != Finished::No; }
    Finished finished_as() const { return finished_; }
    const std::optional<std::string>& result() const { return result_; }

  private:
    struct State;
    Job job_;
    Client& client_;
    ProgressSink report_progress_;
    std::shared_ptr<State> state_;
    std::optional<std::string> result_;
    Finished finished_ = Finished::No;
};

using Handler = std::function<void(JobContext&)>;

struct WorkerOptions {
    std::string conninfo;  // empty: PG* environment
    std::string queue = "default";
    int concurrency = 1;  // jobs run at once, each on its own thread and connection
    int max_batch = 16;   // most jobs fetched in one pull when the queue is deep
    // Jobs claimed beyond the free handler threads and held locally until a thread is free, so
    // that one pull (and the commit that carries the finished jobs' completions) moves many jobs
    // and the next batch is fetched while the handlers still run the current one. Held jobs are
    // leased and heartbeated like running ones, so no other worker can take them meanwhile; on
    // shutdown they are released without using up an attempt. Unset: `concurrency`, which at
    // most doubles the jobs one worker holds and bounds the wait of a held job by about one
    // handler's run. Set 0 for long jobs shared by several workers (a job should start on an idle
    // worker rather than wait behind a busy one), more for short jobs on a deep queue.
    std::optional<int> prefetch;
    // The most jobs run() claims in all: each pull asks for no more than are left, so none is
    // claimed only to be given back, and once the last of them has been handled run() returns
    // (a one-shot worker: a script's, a test's). Unset: no limit.
    std::optional<int> max_jobs;
    // Each job's lease, which its heartbeats extend it by. Unset: the queue's lease as the job is
    // pulled (a lease changed while the job runs applies from the next pull).
    std::optional<Duration> lease;
    // Binds each lease to the server session that pulled the job (queue_pull's session_bound), so
    // that the reaper rescues the jobs of a worker process that dies at once, not when their
    // leases run out. Unset: bound, unless the worker's connections go through a connection
    // pooler (Connection::pooled: PgBouncer, or HOPPER_POOLER=on), which may close that session
    // under a running job (RECONNECT, server_lifetime, server_idle_timeout) and have the reaper
    // hand the job to another worker while this one still runs it; the worker logs once that it
    // found one. false: never bound.
    std::optional<bool> session_bound;
    std::string name;  // recorded as the job's worker (128 bytes); host:pid
    // An idle worker waits for jobs inside the server, in a queue_pull with `wait` on a second
    // connection: the commit that makes a job available wakes it within about a millisecond,
    // with no LISTEN/NOTIFY and no polling. Queues with rate limits (where queue_pull does not
    // wait) and roles whose statement_timeout cuts the wait fall back to LISTEN + poll_interval.
    // false: always LISTEN on "hopper:<queue>" and poll.
    bool waiting_pulls = true;
    // How long one waiting pull waits (kept to 100 ms .. 30 s: it holds a snapshot meanwhile), or,
    // when listening, the fallback poll when no NOTIFY arrives.
    Duration poll_interval = std::chrono::seconds(2);
    double poll_jitter = 0.25;  // +- fraction of poll_interval, so workers do not beat in step
    // Then running handlers are told to stop, and each job is released when its handler returns.
    Duration shutdown_timeout = std::chrono::seconds(30);
    Duration min_backoff = std::chrono::milliseconds(100);  // after database errors, doubling
    Duration max_backoff = std::chrono::seconds(10);
    bool handle_signals = true;  // SIGINT/SIGTERM start a graceful shutdown during run()
    // A handler that returns normally has its job completed by the fetch loop, together with the
    // other jobs finished meanwhile, in the same transaction as its next pull
    // (queue_complete_many + queue_pull: one commit for many jobs instead of one each). The
    // completion lands a moment after the handler returns, at the fetch loop's next turn; false
    // completes each job on its handler's connection at once. Failures, releases, complete_with
    // and completions during shutdown always go on the handler's connection.
    bool batch_completions = true;
    // Where the worker reports what happened (errors, lost jobs); default: stderr. Empty messages
    // are never sent. Called from several threads.
    std::function<void(const std::string&)> log;
};

struct WorkerStats {
    uint64_t completed = 0;
    uint64_t failed = 0;    // failed attempts (retried or dead)
    uint64_t lost = 0;      // finished by the handler, but the job was no longer ours
    uint64_t released = 0;  // given back at shutdown
    uint64_t pulls = 0;     // pull calls that returned at least one job
};

class Worker {
  public:
    explicit Worker(WorkerOptions options);
    // Destroyed while run() runs in another thread, it calls stop() and waits for run() to return
    // (after the graceful shutdown) before its members go. Not from one of its own handlers, whose
    // thread run() waits for.
    ~Worker();
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;

    // Registers the handler for one job kind. Register before run().
    Worker& on(const std::string& kind, Handler handler);
    // Handles jobs whose kind has no handler of its own, and jobs without a kind. Without it such
    // jobs are failed with "no handler for kind ...".
    Worker& on_any(Handler handler);

    // Runs until stop() or a signal (or, with max_jobs, until those jobs are done), then shuts
    // down gracefully: stops pulling, waits up to shutdown_timeout for running jobs, then tells
    // their handlers to stop and releases each job when its handler returns. Returns when every
    // handler has returned: a thread cannot be ended from outside, so one that ignores its stop
    // flag holds run() up. Throws, after that shutdown, the server's hopper::Error when it
    // refused a pull for good (SQLSTATE class 22 or 42, 3F000, 0A000: more jobs than
    // hopper.max_pull, no right to pull), which retrying would meet forever.
    void run();
    // Starts the graceful shutdown; safe from any thread.
    void stop();

    WorkerStats stats() const;

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace hopper
