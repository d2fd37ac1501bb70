#include "option_checks.hpp"

#include <cmath>
#include <stdexcept>

namespace hopper::internal {

void check_worker_options(const std::string& queue, Duration poll_interval, double poll_jitter,
                          Duration shutdown_timeout) {
    if (queue.empty()) throw std::invalid_argument("queue must not be empty");
    if (poll_interval < Duration::zero())
        throw std::invalid_argument("poll_interval must not be negative");
    // NaN passes every comparison false: it would reach the jitter arithmetic as a delay.
    if (!std::isfinite(poll_jitter) || poll_jitter < 0 || poll_jitter > 1)
        throw std::invalid_argument("poll_jitter must be between 0 and 1");
    if (shutdown_timeout < Duration::zero())
        throw std::invalid_argument("shutdown_timeout must not be negative");
}

}  // namespace hopper::internal
