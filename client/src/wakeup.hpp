// A pipe that wakes a thread blocked in poll(): the fetcher waits on its connection socket and on
// this at once, so a freed slot, a stop request or a signal ends the wait without a timeout.
#pragma once

#include <chrono>

namespace hopper::internal {

class Wakeup {
  public:
    Wakeup();
    ~Wakeup();
    Wakeup(const Wakeup&) = delete;
    Wakeup& operator=(const Wakeup&) = delete;

    // Async-signal-safe.
    void notify() noexcept;
    // Empties the pipe after a wake-up.
    void drain() noexcept;
    // Blocks until notify() or the timeout; true if notified.
    bool wait(std::chrono::milliseconds timeout) const;
    int fd() const { return fds_[0]; }

  private:
    int fds_[2];
};

}  // namespace hopper::internal
