// Periodic jobs: cron expressions on timestamptz, and the run of due schedules that queue_push's
// dedup keys make exactly-once per tick. See README "Periodic jobs".
#pragma once

#include <cstdint>
#include <string>

#include "hopper/cron.hpp"
#include "hopper/spi.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

namespace hopper::schedule {

constexpr int kMaxName = 128;

// cron::parse with a refusal raised as 22023 naming the expression.
cron::Schedule parse(const std::string& expression);

// The first matching time strictly after `after`; 22023 when there is none within
// cron::kSearchYears, 22008 beyond the timestamptz range.
TimestampTz next_after(const cron::Schedule& s, const std::string& expression, TimestampTz after);

struct RunCounts {
    uint64_t due;     // schedules run
    uint64_t pushed;  // jobs inserted (a tick that already has its job pushes none)
    uint64_t locked;  // schedules taken up, whether they ran, failed or were left for a drop
};

// Where a run in batches has got to, in the order schedules run (next_run_at, name).
struct Cursor {
    bool started = false;
    TimestampTz next_run_at = 0;
    std::string name;
};

// Runs up to `limit` schedules due at `at` (limit <= 0: all), skipping schedules another session
// is running: one job each for the latest tick due, then next_run_at moves past `at`. Call it in
// a transaction that commits both together. With `after`, only schedules past it, and it moves to
// the last one taken up: a schedule that fails keeps its next_run_at and would otherwise come
// first again in every batch. With hold_while_restoring, nothing runs while a restore is under way
// (the reaper's runs: see schedule_run.cpp).
RunCounts run_due(spi::Connection& conn, TimestampTz at, int64_t limit, Cursor* after = nullptr,
                  bool hold_while_restoring = false);

}  // namespace hopper::schedule
