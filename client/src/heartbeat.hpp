// The worker's control connection and its heartbeat thread. Every running job is registered here;
// the thread extends each lease every lease/3 and raises the job's stop flag when the server says
// the job is no longer ours. Progress reports and releases share the connection, so they never
// interfere with what a handler does on its own connection.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "backoff.hpp"
#include "hopper/worker.hpp"

namespace hopper::internal {

class Heartbeat {
  public:
    using Log = std::function<void(const std::string&)>;
    Heartbeat(std::string conninfo, std::optional<Duration> lease, Duration min_backoff,
              Duration max_backoff, Log log);
    ~Heartbeat();  // stops the thread

    // `ctx` must stay alive until remove(id).
    void add(const Job& job, JobContext& ctx);
    void remove(int64_t id);

    bool progress(int64_t id, int64_t token, double fraction,
                  const std::optional<std::string>& detail);
    // Releases every registered job, then raises its stop flag with `reason`. Returns how many.
    int release_all(StopReason reason);

  private:
    struct Entry {
        int64_t token;
        JobContext* ctx;
        Duration interval;
        std::chrono::steady_clock::time_point next;
    };
    void loop();
    void beat_due();
    Client& control();  // call with control_m_ held

    std::string conninfo_;
    std::optional<Duration> lease_;
    Log log_;

    std::mutex control_m_;  // guards control_ and backoff_
    std::unique_ptr<Client> control_;
    Backoff backoff_;
    std::chrono::steady_clock::time_point retry_after_{};

    std::mutex m_;  // guards entries_ and stop_
    std::condition_variable cv_;
    std::map<int64_t, Entry> entries_;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace hopper::internal
