// The packed rows (hopper.job_batches, include/hopper/batches.hpp) a direct lease claim takes jobs
// from, read and written straight through the access methods as direct_claim.cpp reads hopper.jobs.
//
// It does what the packed claim statement's `packed`, `picked`, `moved` and `emptied` parts do:
// locks the first rows of the queue that are due, FOR UPDATE SKIP LOCKED, as many as n jobs need
// when rows are full (n / 100 + 1, at most n); offers their waiting jobs in pull order, at most n
// from each row; then moves each row's front past the jobs taken, or deletes a row left empty.
// A row updated since the claim's snapshot is locked on its newest version, as EvalPlanQual
// would: it is nearly always another claim's move of the front, and its next jobs are waiting.
//
// Plain C over PostgreSQL's API: call under pg_guard, with no C++ object that has a destructor
// alive in between. Everything is allocated in the current memory context.
#pragma once

#include <cstdint>

#include "hopper/claim_hint.hpp"
#include "hopper/direct_insert.hpp"
#include "hopper/table_columns.hpp"

extern "C" {
#include "postgres.h"
#include "datatype/timestamp.h"
#include "executor/tuptable.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"
}

namespace hopper::packed_claim {

// A locked packed row and what the claim took from it.
struct Row {
    TupleTableSlot* locked;
    int16 priority;
    TimestampTz run_at;
    TimestampTz created_at;
    int32 max_attempts;
    Datum kind;  // text; (Datum)0 when NULL
    bool kind_null;
    int32 taken;  // before this claim
    int32 count;  // jobs in the row
    int32 used;   // taken by this claim
};

// A waiting job of a locked row.
struct Job {
    claim_hint::Key key;
    Datum payload;  // jsonb, in the row's detoasted array
    int row;
};

struct Source {
    Relation rel;
    Relation index;
    int col[batches_table::kColumns];
    direct_insert::Inserter writer;  // the rows' new versions
    Row* rows;
    int n_rows;
    Job* jobs;  // in pull order
    int n_jobs;
    int next;  // the first job not offered yet
};

// Opens hopper.job_batches (RowExclusiveLock) and its pull index. False, with nothing left open,
// where only the statement may claim: the caller may not lock, update and delete the rows, the
// table has something only the statements honour (see direct_insert::defers_to_sql), or a column
// or the index is not as the install script made them.
bool open(Oid relid, Oid index, Source* s);

// Locks the queue's first packed rows due at `at` (see above) and lists their waiting jobs.
void lock_rows(Source* s, Datum queue, TimestampTz at, Snapshot snap, CommandId cid, int64_t n);

// The next job in pull order, nullptr when none is left; take() marks it taken.
const Job* peek(const Source* s);
void take(Source* s);

// Moves the fronts of the rows taken from, deletes the rows emptied, and closes everything.
void finish(Source* s, Snapshot snap);

}  // namespace hopper::packed_claim
