// What a failed attempt leaves behind, for queue_fail (leased jobs) and queue_fail_taken (taken
// jobs, put back by then): each has its own statements to retry or bury the job; this runs them in
// order and keeps the claim hints and "hopper:done" in step with the outcome.
#pragma once

#include <cstdint>
#include <functional>

#include "hopper/spi.hpp"

namespace hopper::failed_attempt {

// `retry` returns (run_at ahead?, queue, priority, run_at) for a job it made available again, no
// row otherwise; `bury` runs only then and returns (queue, notifies done?) for a job it buried.
// Returns "available", "scheduled" or "dead", or nullptr when neither touched the job (it is not
// the caller's to fail); raises P0002 when no job with this id exists.
const char* settle(spi::Connection& conn, int64_t id, const std::function<spi::Result()>& retry,
                   const std::function<spi::Result()>& bury);

}  // namespace hopper::failed_attempt
