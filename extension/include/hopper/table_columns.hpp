// The columns of hopper.jobs and hopper.job_batches as the install script makes them, named once
// for the paths that write those tables without SQL: pushes and packed pushes, and the claims that
// lease or take jobs. Each path finds them by name, so a column it does not know (an operator's,
// a later version's) sends it to the SQL statements, which fill in defaults; so does a column whose
// type differs from the install script's (table_layout::typed), which the statements cast.
#pragma once

#include <cstring>

extern "C" {
#include "postgres.h"
#include "catalog/pg_type_d.h"
}

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
// The columns' types; state's is the extension's enum, whose OID varies (InvalidOid: its labels
// are checked instead).
inline constexpr Oid kTypes[kColumns] = {
    INT8OID, TEXTOID, InvalidOid, INT2OID, TIMESTAMPTZOID, INT4OID, INT4OID, INT8OID,
    TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, BOOLOID, TIMESTAMPTZOID,
    TIMESTAMPTZOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, FLOAT4OID, TEXTOID,
    JSONBOID, JSONBOID, JSONBOID};
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
inline constexpr Oid kTypes[kColumns] = {
    INT8OID, INT8OID, TEXTOID, INT2OID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID, INT4OID,
    INT4OID, INT8ARRAYOID, JSONBARRAYOID};
// clang-format on

}  // namespace batches_table

// The column of `names` (one of the lists above) called `name`; `count` if none.
inline int column_named(const char* const* names, int count, const char* name) {
    for (int c = 0; c < count; ++c)
        if (std::strcmp(name, names[c]) == 0) return c;
    return count;
}

}  // namespace hopper
