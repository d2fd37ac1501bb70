// Claims made straight through the table and index access methods, without a plan or an
// executor tree: an index scan of jobs_pull_idx, a row lock that skips locked rows, then either
//  - a take (queue_take): the row deleted and its history row inserted into its partition, or
//  - a lease (queue_pull): the row updated to running under a new lease token.
//
// The claim statements have some eighteen plan nodes (the queue's settings, the locked
// candidates, the UPDATE or the DELETE and history INSERT, the result), and building and tearing
// them down on every call cost more than the row work itself: a quarter of a one-job take's CPU.
// The direct claim does what those statements do for a queue with no limits, in a transaction
// that takes a new snapshot per statement (READ COMMITTED), with no kinds filter: each candidate
// is locked with SKIP LOCKED, re-checked on its newest version as EvalPlanQual would, and
// claimed. A lease on a queue that has had packed jobs merges them in pull order (include/hopper/
// packed_claim.hpp) and writes the ones it takes into hopper.jobs as running rows, as the packed
// claim statement does. A queue with concurrency limits gets the window claim of include/hopper/
// limited_window.hpp. Anything else (rate limits, a take from a queue that has had packed jobs, a
// kinds filter, REPEATABLE READ, row level security or triggers on the tables, privileges granted
// per column only, a column it does not know, an index not as the install script made it) goes
// to the statement.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hopper/claim_hint.hpp"

extern "C" {
#include "postgres.h"
#include "datatype/timestamp.h"
}

namespace hopper::direct_claim {

// Most result columns of a claimed job.
constexpr int kMaxColumns = 9;

// One claimed job: its result columns, in the caller's memory context, and its place in pull
// order. A take gives hopper.taken_job (id, queue, kind, payload, attempt, run_at, created_at),
// a lease hopper.leased_job (id, queue, kind, payload, attempt, lease_token, lease_until, run_at,
// created_at).
struct Row {
    Datum values[kMaxColumns];
    bool nulls[kMaxColumns];
    claim_hint::Key key;
};

struct Claimed {
    bool limited = false;    // a lease found the queue limited: nothing claimed (see pull.cpp)
    bool unsettled = false;  // lease_window(): the keys statement must claim; nothing claimed
    // lease_window(): the first job passed over because its key was full (limited_window::Choice)
    std::optional<claim_hint::Key> first_passed;
    bool notify_done = false;  // the queue announces finished jobs
    bool took_packed = false;  // some of the jobs came from packed rows
    // lease_window(): some of the jobs were written by this transaction (pushed, retried,
    // unpacked in it), so other transactions cannot see them yet
    bool own_rows = false;
    std::vector<Row> rows;  // in pull order
};

// What both claims are given: up to n jobs of queue due at `at`, starting at `start` in pull order
// if given, for `worker`.
struct Claim {
    const std::string& queue;
    int64_t n;
    TimestampTz at;
    const claim_hint::Key* start;
    const std::optional<std::string>& worker;
};

// Takes the jobs (completed when the transaction commits). nullopt: this take must go through the
// SQL statement, and nothing was changed.
std::optional<Claimed> take(const Claim& claim);

// Leases the jobs for `lease_us` (the queue's lease when nullopt), recording the session as
// claimed_pid and claimed_backend_start. nullopt as for take; `limited` when the queue has limits
// (its claim is limits::claim_statement()'s).
std::optional<Claimed> lease(const Claim& claim, std::optional<int64_t> lease_us,
                             bool session_bound);

// The lease of a queue with concurrency limits and no rate limits, holding the queue's lock: the
// window claim of include/hopper/limited_window.hpp, given the jobs in flight (sorted). nullopt
// where limits::claim()'s statements must claim, and `unsettled` where its keys statement must.
std::optional<Claimed> lease_window(const Claim& claim, std::optional<int64_t> lease_us,
                                    bool session_bound, const std::vector<int64_t>& inflight);

}  // namespace hopper::direct_claim
