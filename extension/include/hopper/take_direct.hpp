// queue_take's jobs taken straight through the table and index access methods, without a plan
// or an executor tree: an index scan of jobs_pull_idx, a row lock that skips locked rows, the
// DELETE, and the history row inserted into its partition.
//
// The take statement has some eighteen plan nodes (the queue's settings, the locked candidates,
// the DELETE, the history INSERT, the result), and building and tearing them down on every call
// was a quarter of a one-job take's CPU, more than the row work itself. The direct take does what
// that statement does for a queue with no limits and no packed rows, in a transaction that takes
// a new snapshot per statement (READ COMMITTED), with no kinds filter: each candidate is locked
// with SKIP LOCKED, re-checked on its newest version as EvalPlanQual would, deleted, and copied to
// history if the queue keeps it. Anything else (limits, packed rows, a kinds filter, REPEATABLE
// READ, row level security, triggers on hopper.jobs, privileges granted per column only, a column
// it does not know, an index that is not as the install script made it) goes to the statement.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hopper/claim_hint.hpp"

extern "C" {
#include "postgres.h"
}

namespace hopper::take_direct {

// One taken job: its hopper.taken_job columns (id, queue, kind, payload, attempt, run_at,
// created_at), in the caller's memory context, and its place in pull order.
struct Row {
    Datum values[7];
    bool nulls[7];
    claim_hint::Key key;
};

struct Taken {
    bool notify_done = false;  // the queue announces finished jobs
    std::vector<Row> rows;     // in pull order
};

// Takes up to n jobs of queue due at `at` (starting at `start` in pull order, if given) for
// `worker`. nullopt: this take must go through the SQL statement, and nothing was changed.
std::optional<Taken> take(const std::string& queue, int64_t n, TimestampTz at,
                          const claim_hint::Key* start, const std::optional<std::string>& worker);

}  // namespace hopper::take_direct
