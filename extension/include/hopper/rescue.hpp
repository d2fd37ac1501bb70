// Rescuing jobs whose lease expired: shared by queue_pull (inline, so expired jobs are claimable
// even with no reaper running) and the reaper.
#pragma once

#include <cstdint>
#include <string>

#include "hopper/spi.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

namespace hopper::rescue {

struct Counts {
    uint64_t retried = 0;  // back to available
    uint64_t dead = 0;     // attempts used up
};

// Rescues up to `limit` running jobs of `queue` whose lease ended before `at`. Their lease token is
// cleared, so the old holder can no longer complete, fail, heartbeat or report progress. With
// `backoff` they come back after the queue's retry backoff; without, at `at`.
Counts expired_leases(spi::Connection& conn, const std::string& queue, TimestampTz at, int64_t limit,
                      bool backoff);

}  // namespace hopper::rescue
