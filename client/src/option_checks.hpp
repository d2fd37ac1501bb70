// Checks of the options Worker and TakeWorker share, so that both refuse the same values.
#pragma once

#include <string>

#include "hopper/types.hpp"

namespace hopper::internal {

// Throws std::invalid_argument for an empty queue name, a negative poll_interval or
// shutdown_timeout, or a poll_jitter that is not a number between 0 and 1.
void check_worker_options(const std::string& queue, Duration poll_interval, double poll_jitter,
                          Duration shutdown_timeout);

}  // namespace hopper::internal
