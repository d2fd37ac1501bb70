// SIGINT/SIGTERM turned into a graceful shutdown: while a SignalWatch lives, the signals set a
// flag and wake the worker's poll instead of killing the process. Several workers of one process
// may watch at once: the first watch installs the handlers, every watch is woken by a signal, and
// the handlers found before the first come back when the last watch ends.
#pragma once

#include <csignal>
#include <cstddef>
#include <cstdint>

#include "wakeup.hpp"

namespace hopper::internal {

class SignalWatch {
  public:
    // Throws std::runtime_error when too many watches are alive at once.
    explicit SignalWatch(Wakeup& wake);
    ~SignalWatch();
    SignalWatch(const SignalWatch&) = delete;
    SignalWatch& operator=(const SignalWatch&) = delete;

    // Whether SIGINT or SIGTERM arrived since this watch was made; a signal that stopped an
    // earlier worker does not stop the next one.
    bool received() const;
    // How many SIGINT/SIGTERM arrived since this watch was made: a second one, while the worker
    // is already shutting down, hurries the shutdown.
    uint64_t count() const;

  private:
    size_t slot_;
    uint64_t seen_;  // signals counted before this watch
};

}  // namespace hopper::internal
