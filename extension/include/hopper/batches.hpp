// Packed batches: the jobs of one queue_push_batch stored in rows of up to kJobsPerRow, ids and
// payloads in arrays (hopper.job_batches). Claims take jobs from the front of a row; whatever acts
// on one waiting job, or on a queue with limits, unpacks rows into ordinary hopper.jobs rows first.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hopper/spi.hpp"

namespace hopper::batches {

// Jobs in one packed row: the array a claim slices stays small enough to stay in the row (no
// TOAST reads on the claim), and a claim of up to this many jobs locks at most two rows.
constexpr int kJobsPerRow = 100;

// What a packed push needs; the payloads are a one-dimensional jsonb[] without NULLs.
struct Push {
    std::string queue;
    std::optional<TimestampTz> run_at;
    int16_t priority = 0;
    std::optional<std::string> kind;
    std::optional<int32_t> max_attempts;
    Datum payloads = 0;
    int64_t jobs = 0;
};

// Whether a batch may be packed: hopper.pack_batches is on, it has two jobs or more, no keys, and
// its jobs are due by the time the push's transaction started.
bool packable(int64_t jobs, bool any_key, std::optional<TimestampTz> run_at);

// Stores the batch in packed rows and returns the new ids in payload order, or nothing when the
// queue has limits (its claims count rows: the caller pushes a row per job instead). The queue
// must exist.
std::optional<std::vector<int64_t>> push(spi::Connection& conn, const Push& batch);

// Moves every packed job of `queue` into hopper.jobs as an available row; returns how many.
// Waits for claims that hold one of the queue's rows.
int64_t unpack_queue(spi::Connection& conn, const std::string& queue);

// Moves the packed row that holds waiting job `id`, if any, into hopper.jobs as available rows.
// Returns whether there was one.
bool unpack_job(spi::Connection& conn, int64_t id);

}  // namespace hopper::batches
