// One pass of a reaper: the work it repeats every hopper.reaper_naptime. Each step runs in short
// transactions of its own, batched by hopper.reaper_batch_size, so that a storm of stuck jobs never
// becomes one long transaction holding thousands of row locks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

extern "C" {
#include "postgres.h"
#include "datatype/timestamp.h"
}

namespace hopper::reaper {

// What a reaper remembers between passes. Plain data: it lives in a static of the worker.
struct PassState {
    TimestampTz last_due_check;  // 0 before the first pass
    TimestampTz last_prune;      // 0 before the first retention run
    uint64_t rescued;            // jobs rescued since this reaper started
    uint64_t pruned;             // history rows pruned since this reaper started
};

enum class PassOutcome {
    done,
    skipped,         // a lock the pass starts with was not free in time (DROP EXTENSION, DDL)
    extension_gone,  // DROP EXTENSION: the reaper exits
    misplaced,       // the schema named hopper is not one to trust (reaper::installed()): exits
    stopped,         // reaper_stop(): the reaper exits
    step_aside,      // someone needs the database alone (see database_wanted()): the reaper exits
};

// Runs one pass. Throws hopper::PgError on failure; the transaction at fault is rolled back and
// the steps committed before it stay done.
PassOutcome run_pass(PassState& state);

// Thrown between two transactions when the reaper must let go of its database; run_pass returns
// PassOutcome::step_aside.
struct StepAside {};

// Between two batches of a long step: lets SIGTERM (die) and pg_cancel_backend reach the reaper,
// relays the wake-ups of pushes that committed meanwhile, and gives way to DROP DATABASE and
// friends (throws StepAside). Outside any transaction.
void check_for_interrupts();

// History retention: keeps the upcoming daily partitions, drops whole partitions older than the
// longest retention of any queue, deletes rows older than their own queue's retention, and drops
// the partitions of past days left with no row. Returns the number of history rows removed.
uint64_t prune_history(int64_t batch);

}  // namespace hopper::reaper
