// The columns of hopper.jobs and hopper.job_batches as the install script makes them, named once
// for the paths that write those tables without SQL: pushes and packed pushes, and the claims that
// lease or take jobs. Each path finds them by name, so a column it does not know (an operator's,
// a later version's) sends it to the SQL statements, which fill in defaults.
#pragma once

#include <cstring>

namespace hopper {

namespace jobs_table {

enum Column {
    kId,
    kQueue,
    kState,
    kPriority,
    kRunAt,
    kAttempt,
    kMaxAttempts,
    kLeaseToken,
    kLeaseUntil,
    kClaimedPid,
    kClaimedBackendStart,
    kSessionBound,
    kCreatedAt,
    kStartedAt,
    kKind,
    kWorker,
    kDedupKey,
    kConcurrencyKey,
    kProgress,
    kLastError,
    kErrors,
    kProgressDetail,
    kPayload,
    kColumns
};

// clang-format off
inline constexpr const char* kNames[kColumns] = {
    "id", "queue", "state", "priority", "run_at", "attempt", "max_attempts", "lease_token",
    "lease_until", "claimed_pid", "claimed_backend_start", "session_bound", "created_at",
    "started_at", "kind", "worker", "dedup_key", "concurrency_key", "progress", "last_error",
    "errors", "progress_detail", "payload"};
// clang-format on

}  // namespace jobs_table

namespace batches_table {

enum Column {
    kFirstId,
    kLastId,
    kQueue,
    kPriority,
    kRunAt,
    kCreatedAt,
    kKind,
    kMaxAttempts,
    kTaken,
    kIds,
    kPayloads,
    kColumns
};

// clang-format off
inline constexpr const char* kNames[kColumns] = {
    "first_id", "last_id", "queue", "priority", "run_at", "created_at", "kind", "max_attempts",
    "taken", "ids", "payloads"};
// clang-format on

}  // namespace batches_table

// The column of `names` (one of the lists above) called `name`; `count` if none.
inline int column_named(const char* const* names, int count, const char* name) {
    for (int c = 0; c < count; ++c)
        if (std::strcmp(name, names[c]) == 0) return c;
    return count;
}

}  // namespace hopper
