// The worker's control connection and its heartbeat thread. Every job the worker has claimed is
// registered here, from its pull (held locally, see WorkerOptions::prefetch) until its outcome is
// reported (by its handler's thread, or in the fetch loop's batch of completions); the thread
// extends each lease every lease/3 and, when the server says the job is no longer ours, raises a
// running job's stop flag or marks a held one not to be started. Progress reports and releases
// share the connection, so they never interfere with what a handler does on its own connection. The
// jobs' on_stop callbacks run on a second thread, holding no lock of this class: user code that
// runs long, or calls back into the worker, holds up no heartbeat, nor the pulls and handlers that
// register their jobs here.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "backoff.hpp"
#include "hopper/worker.hpp"

namespace hopper::internal {

// How often a job pulled with `lease` (the worker's, or unset for the queue's) is heartbeated:
// a third of its lease, between 100 ms and 10 minutes. It does not depend on this machine's clock
// agreeing with the server's.
Duration heartbeat_interval(const Job& job, std::optional<Duration> lease);
// How far each of the job's heartbeats extends its lease: by the lease it was pulled with (the
// worker's, or what the pull left of the queue's), the length its interval is a third of. Not the
// queue's lease of the moment: a queue whose lease was shortened while the job ran had the job
// beaten every third of its old lease and extended by the new one, and lose its lease between
// beats. At least three of the shortest intervals.
Duration heartbeat_extension(const Job& job, std::optional<Duration> lease);

class Heartbeat {
  public:
    using Log = std::function<void(const std::string&)>;
    Heartbeat(std::string conninfo, std::optional<Duration> lease, Duration min_backoff,
              Duration max_backoff, Log log);
    ~Heartbeat();  // stops the thread

    // Jobs are known by id and lease token: a job this worker pulled again (its lease lost, then
    // claimed anew) is another run, heartbeated and stopped on its own.
    //
    // A job claimed but not started yet: its lease is kept like a running job's.
    void hold(const Job& job);
    // The job's handler starts: `ctx` must stay alive until remove(). Returns None, or why a held
    // job must not be started after all (its lease was lost, it was cancelled or released).
    StopReason add(const Job& job, JobContext& ctx);
    // The job's handler returned (its context is about to go): its lease is still kept until
    // remove(), since its report, or the batch of completions it waits in, may take a while, and a
    // lease run out meanwhile would have the job run again although its handler succeeded.
    void finish(const Job& job);
    void remove(const Job& job);
    void remove(const std::vector<int64_t>& ids, const std::vector<int64_t>& tokens);

    bool progress(int64_t id, int64_t token, double fraction,
                  const std::optional<std::string>& detail);
    // At the shutdown deadline: releases the held jobs (no handler works on them) and raises the
    // running jobs' stop flags with `reason`, keeping their leases until remove(), as their
    // handlers may still be at work. Jobs being reported are left to their reports. Returns how
    // many were released, and the ids of the running jobs told to stop.
    struct Stopped {
        int released = 0;
        std::vector<int64_t> running;
    };
    Stopped stop_all(StopReason reason);

  private:
    using Run = std::pair<int64_t, int64_t>;  // job id, lease token
    struct Entry {
        JobContext* ctx;  // null while the job is held, and once its handler returned
        bool finishing;   // its handler returned: its report is under way
        Duration interval;
        Duration extension;  // each heartbeat's (heartbeat_extension)
        std::chrono::steady_clock::time_point next;
    };
    void loop();
    void beat_due();
    Client& control();  // call with control_m_ held
    // Runs f(control()) with the control connection's 200 ms lock wait in force (control_m_ held).
    template <typename F>
    auto limited(F&& f) -> decltype(f(std::declval<Client&>()));
    void drop(std::map<Run, Entry>::iterator it, StopReason reason);  // call with m_ held
    // Raises a running job's stop flag and queues its callbacks; call with m_ held.
    void raise_stop(std::map<Run, Entry>::iterator it, StopReason reason);
    void run_stops();
    void end_stops();  // runs the queued callbacks, then ends the stopper thread

    // The on_stop callbacks to run, in order. The lock is taken last (after m_) and held only to
    // queue or take one; the callbacks run outside it.
    struct Stop {
        int64_t id;
        std::function<void()> fn;
    };
    std::mutex stops_m_;
    std::condition_variable stops_cv_;
    std::deque<Stop> stops_;
    bool stops_end_ = false;
    std::thread stopper_;

    std::string conninfo_;
    std::optional<Duration> lease_;
    Log log_;

    std::mutex control_m_;  // guards control_ and backoff_
    std::unique_ptr<Client> control_;
    Backoff backoff_;
    std::chrono::steady_clock::time_point retry_after_{};

    std::mutex m_;  // guards entries_ and stop_
    std::condition_variable cv_;
    std::map<Run, Entry> entries_;
    std::map<Run, StopReason> gone_;  // held jobs that must not start, until add() or remove()
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace hopper::internal
