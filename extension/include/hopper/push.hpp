// Pushing one job, shared by queue_push and the periodic-job scheduler.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "hopper/spi.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

namespace hopper::push {

struct Job {
    std::string queue;
    Datum payload;  // a checked JSON object
    std::optional<TimestampTz> run_at;
    int16_t priority = 0;
    std::optional<std::string> kind;
    std::optional<int32_t> max_attempts;
    std::optional<std::string> dedup_key;
    std::optional<std::string> concurrency_key;
    std::optional<int64_t> dedup_window_us;  // only with dedup_key
};

struct Pushed {
    int64_t id;
    bool inserted;  // false: a deduplicated push that returned an earlier job
};

// Inserts the job (creating its queue if allowed) or returns the job it duplicates. Raises 40001
// when the deduplicated job kept changing under it.
Pushed one(spi::Connection& conn, const Job& job);

}  // namespace hopper::push
