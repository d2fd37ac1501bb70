// Exponential back-off with full jitter for retrying database work after errors.
#pragma once

#include <random>

#include "hopper/types.hpp"

namespace hopper::internal {

class Backoff {
  public:
    Backoff(Duration min, Duration max);
    // The next delay: a random point in [min, current], current doubling up to max.
    Duration next();
    void reset();

  private:
    Duration min_;
    Duration max_;
    Duration current_;
    std::mt19937_64 rng_;
};

// d scaled by a random factor in [1 - jitter, 1 + jitter].
Duration jittered(Duration d, double jitter);

// How long one waiting pull or take waits in the server: the poll interval, jittered, kept
// between 100 ms (a wait of 0 would return at once and the worker would spin) and 30 s (the
// statement holds a snapshot while it waits, holding back VACUUM).
Duration server_wait(Duration poll_interval, double jitter);

// How long a listening worker waits for a NOTIFY before it polls: the poll interval, jittered, at
// least 100 ms (a wait of 0 would have it poll in a loop, a commit each turn).
Duration listen_poll(Duration poll_interval, double jitter);

}  // namespace hopper::internal
