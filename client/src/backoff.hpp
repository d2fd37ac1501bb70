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

}  // namespace hopper::internal
