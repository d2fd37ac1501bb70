// Queue lookups used by the job functions.
#pragma once

#include <string>

#include "hopper/spi.hpp"

namespace hopper::queues {

// Makes sure `queue` exists: creates it with default settings when hopper.auto_create_queues is on,
// otherwise raises P0002.
void ensure(spi::Connection& conn, const std::string& queue);

// Raises P0002 unless `queue` exists.
void require(spi::Connection& conn, const std::string& queue);

}  // namespace hopper::queues
