// The packed rows of a batch, inserted straight through the table and index access methods, as
// the single push inserts its row (include/hopper/push_insert.hpp).
//
// The SQL INSERT that sliced the batch into rows built an executor of a dozen nodes on every
// call (the queue's row, the ids drawn, the slices, the sort, the RETURNING), a fifth of a packed
// push's CPU. The direct insert does what that INSERT does with this table as the install script
// makes it: the privilege checks, the NOT NULL constraints, the heap row (compressed as the
// column says), every index entry and the sequence's own permission check. Row level security,
// triggers, privileges granted per column only or a column it does not know send the batch back
// to the SQL statement.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "hopper/batches.hpp"

namespace hopper::batches {

// Stores `batch` in packed rows of up to kJobsPerRow jobs, each with `max_attempts`, and returns
// the new ids in payload order; nullopt when the SQL INSERT must do it (nothing was written then).
std::optional<std::vector<int64_t>> insert_direct(const Push& batch, int32_t max_attempts);

}  // namespace hopper::batches
