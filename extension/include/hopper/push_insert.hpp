// The row of a pushed job, inserted straight through the table and index access methods (as COPY
// and logical replication insert rows), without a plan or an executor tree.
//
// A one-row INSERT through SPI builds and tears down its whole executor on every call: the Result
// node's 23-column projection and tuple descriptor, the ModifyTable node, the plan-cache check.
// That was two fifths of a push's CPU, more than the row and its index entries. The direct insert
// does what the INSERT would do with this table as the install script makes it: the privilege
// checks, the NOT NULL and CHECK constraints, the heap row, every index entry (partial-index
// predicates included) and the sequence's own permission check. Anything it does not handle (row
// level security, triggers, a column it does not know, privileges granted per column only) sends
// the push back to the SQL statement.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "hopper/push.hpp"

namespace hopper::push {

// Inserts `job` (which has no dedup key) as an available job with `max_attempts`. Returns its id,
// or nullopt when the SQL INSERT must do it (nothing was written then).
std::optional<int64_t> insert_direct(const Job& job, int32_t max_attempts);
// Inserts `jobs` (of one queue, none with a dedup key) with `max_attempts`, in their order: the
// ids ascend with it. Their heap rows go in with one heap_multi_insert per 100, as COPY writes
// them, then each row's index entries. nullopt when the SQL INSERT must do it (nothing written).
std::optional<std::vector<int64_t>> insert_direct(const std::vector<Job>& jobs,
                                                  int32_t max_attempts);

}  // namespace hopper::push
