// The window claim of a queue with concurrency limits, without the statement: which of the
// queue's first jobs in pull order a pull may take, read through the access methods.
//
// limits::window_statement() does this in SQL, and building and tearing down its fifty-odd plan
// nodes on every pull cost more than reading the few rows they see: a limited queue claimed a
// third of what an unlimited one did, its claims taking turns on the queue's lock. This reads
// what the statement reads, with the same answer: the queue's running jobs per key (from
// jobs_lease_idx, and the jobs other transactions' claims hold in flight, include/hopper/
// inflight_claims.hpp), the first 32 + 4n due jobs of jobs_pull_idx, and the limits of their
// keys (hopper.queue_key_limits); then it picks each key's free count of its jobs in pull order,
// up to n and the queue's free slots. When that picks fewer than the budget while more jobs lie
// past the window (full keys hold the front of the queue), the window does not settle the pull,
// nothing is picked, and limits::keys_statement() claims instead. The caller locks and leases
// the picks, as the statement's UPDATE would (direct_claim.cpp).
//
// The window starts at the queue's claim hint (include/hopper/claim_hint.hpp), as unlimited
// claims do: claimed and finished jobs leave dead entries at the front of jobs_pull_idx, and a
// window read from the front walked all of them (a fifth of the machine in a drain of a limited
// queue). The hint promises that no job waits below it, so the window holds the same jobs. A
// limited claim passes over jobs of full keys, which still wait: it raises the hint no further
// than the first of those.
//
// Queues with rate limits, whose claims spend tokens, stay with the statements.
//
// Plain C over PostgreSQL's API: call under pg_guard, with no C++ object that has a destructor
// alive in between.
#pragma once

#include <cstdint>

#include "hopper/claim_hint.hpp"

extern "C" {
#include "postgres.h"
#include "datatype/timestamp.h"
#include "storage/itemptr.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"
}

namespace hopper::limited_window {

// What the window reads besides hopper.jobs and jobs_pull_idx, opened by open().
struct Source {
    Relation jobs_pkey;
    Relation lease_idx;  // jobs_lease_idx
    Relation key_limits;
    Relation key_limits_pkey;
    int key_limits_max;  // its max_running column
};

// Opens them (AccessShareLock); false, with nothing left open, where the statement must claim:
// a missing relation or privilege, row level security on hopper.queue_key_limits, an index not
// as the install script made it, or concurrency keys compared by a collation for which equal is
// not byte-equal. `col` maps jobs_table's columns onto `jobs`.
bool open(Relation jobs, const int* col, Source* s);
void close(Source* s);

// The queue's side of the pull.
struct Pull {
    Datum queue;
    TimestampTz at;
    int64 n;
    int32 max_running;      // -1: no cap
    int32 key_max_running;  // -1: no default per key
    const int64* inflight;  // the jobs in flight, sorted
    int n_inflight;
    Oid available;  // hopper.job_state's labels
    Oid running;
    // Where the window starts: the queue's claim hint (include/hopper/claim_hint.hpp), below which
    // no job waits; nullptr: the front.
    const claim_hint::Key* start;
};

// How many jobs choose() picked, and the first job it passed over because its key was full (no
// job waits before it, so the hint may go up to it).
struct Choice {
    int n_picks;
    bool passed;
    claim_hint::Key first_passed;
};

// Chooses the jobs: their TIDs (as `snap` sees them) into `picks`, which has room for n, in pull
// order. False when the window does not settle the pull (nothing picked). `pull_idx` is
// jobs_pull_idx, checked by the caller to be on (queue, priority, run_at, id).
bool choose(const Source& s, Relation jobs, Relation pull_idx, const int* col, const Pull& p,
            Snapshot snap, ItemPointerData* picks, Choice* out);

}  // namespace hopper::limited_window
