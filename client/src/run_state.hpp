// Whether a worker's run() is under way: destroying the worker from another thread stops it and
// waits for run() to end, rather than freeing what run() still uses.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <stdexcept>

namespace hopper::internal {

class RunState {
  public:
    // Held by run() from its start: its destructor, run()'s last act, ends the run.
    class Scope {
      public:
        // Throws std::logic_error(already) when a run is under way.
        Scope(RunState& state, const char* already) : state_(state) {
            if (state_.running_.exchange(true)) throw std::logic_error(already);
        }
        ~Scope() {
            std::lock_guard<std::mutex> lock(state_.m_);
            state_.running_.store(false);
            state_.ended_.notify_all();
        }
        Scope(const Scope&) = delete;
        Scope& operator=(const Scope&) = delete;

      private:
        RunState& state_;
    };

    // For the worker's destructor: when a run is under way, calls stop() and waits for it to end.
    template <typename Stop>
    void stop_and_wait(Stop stop) {
        std::unique_lock<std::mutex> lock(m_);
        if (!running_.load()) return;
        stop();
        ended_.wait(lock, [this] { return !running_.load(); });
    }

  private:
    std::atomic<bool> running_{false};
    std::mutex m_;  // guards the end of a run, for stop_and_wait
    std::condition_variable ended_;
};

}  // namespace hopper::internal
