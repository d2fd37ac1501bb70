// SIGINT/SIGTERM turned into a graceful shutdown: while a SignalWatch lives, the signals set a
// flag and wake the worker's poll instead of killing the process. The previous handlers come back
// when it is destroyed. One watch at a time per process.
#pragma once

#include <csignal>

#include "wakeup.hpp"

namespace hopper::internal {

class SignalWatch {
  public:
    explicit SignalWatch(Wakeup& wake);
    ~SignalWatch();
    SignalWatch(const SignalWatch&) = delete;
    SignalWatch& operator=(const SignalWatch&) = delete;

    // Whether SIGINT or SIGTERM arrived since construction.
    static bool received();

  private:
    struct sigaction old_int_;
    struct sigaction old_term_;
};

}  // namespace hopper::internal
