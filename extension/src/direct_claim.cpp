// See include/hopper/direct_claim.hpp.
#include <cstring>

#include "hopper/args.hpp"
#include "hopper/boundary.hpp"
#include "hopper/direct_access.hpp"
#include "hopper/direct_claim.hpp"
#include "hopper/direct_insert.hpp"
#include "hopper/leaf_walk.hpp"
#include "hopper/limited_window.hpp"
#include "hopper/lease_rows.hpp"
#include "hopper/packed_claim.hpp"
#include "hopper/queue_rows.hpp"
#include "hopper/table_columns.hpp"
#include "hopper/table_layout.hpp"

extern "C" {
#include "access/genam.h"
#include "access/nbtree.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/htup_details.h"
#include "storage/bufmgr.h"
#include "storage/procarray.h"
#include "catalog/pg_am.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "nodes/bitmapset.h"
#include "nodes/primnodes.h"
#include "utils/relcache.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

namespace hopper::direct_claim {
namespace {

using namespace direct_access;

using namespace jobs_table;

enum class Mode { kTake, kLease };

struct Request {
    Mode mode;
    const char* queue;
    int queue_len;
    int64_t n;
    TimestampTz at;
    const claim_hint::Key* start;
    const char* worker;  // nullptr: none
    int worker_len;
    std::optional<int64_t> lease_us;  // nullopt: the queue's
    TimestampTz lease_at;             // the job's start: args::lease_clock(at) for a lease
    bool session_bound;
    // A lease on a queue with concurrency limits, under its lock: the window claim
    // (include/hopper/limited_window.hpp), with the jobs in flight, sorted.
    bool window;
    const int64* inflight;
    int n_inflight;

    bool usable;
    bool limited;    // the queue has limits: nothing was claimed
    bool unsettled;  // the window did not settle the pull: nothing was claimed
    bool passed;     // the window passed over a job of a full key, first_passed
    claim_hint::Key first_passed;
    bool notify_done;
    bool took_packed;
    bool own_rows;  // the window claimed a job written by this transaction
    int claimed;
    int capacity;
    Row* rows;  // palloc'd in the caller's memory context
};

// Whether the index's predicate is the install script's: state = 'available'. Without it the
// scan would lock running jobs before passing them over, and hold up their completions.
bool only_available(Relation idx, int state_col, Oid available) {
    // The relcache keeps the predicate once it has been read (RelationGetIndexPredicate hands out
    // a copy each time): read it from there, since every claim asks.
    if (idx->rd_indpred == NIL) list_free_deep(RelationGetIndexPredicate(idx));
    List* pred = idx->rd_indpred;
    if (list_length(pred) != 1 || !IsA(linitial(pred), OpExpr)) return false;
    auto* op = reinterpret_cast<OpExpr*>(linitial(pred));
    if (op->opfuncid != F_ENUM_EQ || list_length(op->args) != 2) return false;
    auto* left = reinterpret_cast<Node*>(linitial(op->args));
    auto* right = reinterpret_cast<Node*>(lsecond(op->args));
    if (!IsA(left, Var) || !IsA(right, Const)) return false;
    auto* value = reinterpret_cast<Const*>(right);
    return reinterpret_cast<Var*>(left)->varattno == state_col && !value->constisnull &&
           DatumGetObjectId(value->constvalue) == available;
}

// Whether jobs_pull_idx is the index the scan keys below are built for: btree, valid, on
// (queue, priority, run_at, id) (their types checked with the table's columns), ascending, under a
// deterministic collation (so that equal queue names are the same name), holding the available
// jobs alone. A rebuilt index that differs leaves the claim to the statements.
bool pull_index_as_expected(Relation idx, Relation jobs, const int* col, Oid available) {
    Form_pg_index ix = idx->rd_index;
    if (idx->rd_rel->relam != BTREE_AM_OID || ix->indrelid != RelationGetRelid(jobs) ||
        !ix->indisvalid || !ix->indisready || ix->indnkeyatts != 4 || !leaf_walk::usable(idx) ||
        !only_available(idx, col[kState], available))
        return false;
    const int keys[4] = {col[kQueue], col[kPriority], col[kRunAt], col[kId]};
    for (int i = 0; i < 4; ++i)
        if (ix->indkey.values[i] != keys[i]) return false;
    return true;
}

// Whether the locked version of a candidate still qualifies, as EvalPlanQual would re-check the
// claim statement's conditions on a row updated since the scan's snapshot.
bool still_due(TupleTableSlot* slot, const int* col, Oid available, Datum queue, Oid collation,
               TimestampTz at, const claim_hint::Key* start) {
    bool isnull;
    Datum state = slot_getattr(slot, col[kState], &isnull);
    if (isnull || DatumGetObjectId(state) != available) return false;
    Datum q = slot_getattr(slot, col[kQueue], &isnull);
    if (isnull || !DatumGetBool(DirectFunctionCall2Coll(texteq, collation, q, queue))) return false;
    TimestampTz run_at = DatumGetTimestampTz(slot_getattr(slot, col[kRunAt], &isnull));
    if (isnull || run_at > at) return false;
    if (start == nullptr) return true;
    int16 priority = DatumGetInt16(slot_getattr(slot, col[kPriority], &isnull));
    int64 id = DatumGetInt64(slot_getattr(slot, col[kId], &isnull));
    if (priority != start->priority) return priority > start->priority;
    if (run_at != start->run_at) return run_at > start->run_at;
    return id >= start->id;
}

// Whether another transaction, still running, holds the row the scan found: SKIP LOCKED would
// pass it over, and so does the claim, without trying the lock. Workers that start from the same
// claim hint meet each other's rows all the time (a drain of 100 at a time tried 2.5 rows per job
// it got), and a failed table_tuple_lock costs an exclusive buffer lock and two trips to the lock
// manager (the tuple lock and the holder's transaction lock); this costs a shared buffer lock and
// a look at the proc array. A holder that commits or aborts meanwhile is the race SKIP LOCKED has
// too; anything this does not recognize goes on to the lock, which decides.
bool held_by_other(TupleTableSlot* found) {
    auto* slot = reinterpret_cast<BufferHeapTupleTableSlot*>(found);
    if (!TTS_IS_BUFFERTUPLE(found) || !BufferIsValid(slot->buffer) || slot->base.tuple == nullptr)
        return false;
    LockBuffer(slot->buffer, BUFFER_LOCK_SHARE);
    HeapTupleHeader header = slot->base.tuple->t_data;
    uint16 infomask = header->t_infomask;
    TransactionId xmax = HeapTupleHeaderGetRawXmax(header);
    LockBuffer(slot->buffer, BUFFER_LOCK_UNLOCK);
    if (infomask & (HEAP_XMAX_INVALID | HEAP_XMAX_COMMITTED | HEAP_XMAX_IS_MULTI)) return false;
    return TransactionIdIsNormal(xmax) && !TransactionIdIsCurrentTransactionId(xmax) &&
           TransactionIdIsInProgress(xmax);
}

// Claims of up to this many jobs that resume at the hint read their first candidates with
// leaf_walk (include/hopper/leaf_walk.hpp); larger ones read most of a page anyway. The walk
// collects twice the jobs wanted and a few more: workers that start from the same hint pass over
// each other's rows.
constexpr int kWalkMaxJobs = 32;
constexpr int kWalkSlack = 8;
constexpr int walk_candidates(int64_t n) {
    return static_cast<int>(2 * n) + kWalkSlack;
}

// What one claim works with once its queue and tables are open (claim_rows sets it up).
struct Claimer {
    Request* r;
    bool take;
    MemoryContext caller;  // where result rows go
    Tables t;
    Snapshot snap;
    CommandId cid;
    Datum queue;
    Relation jobs;
    TupleDesc jd;
    int col[kColumns];
    Oid available;
    Oid done_state;  // completed (take) or running (lease)
    Relation idx;
    TupleTableSlot* found;   // the candidate the scan is on
    TupleTableSlot* locked;  // its newest version, once locked
    // A lease updates the row through a result relation of its own, with the indexes the new
    // version goes into: the primary key and jobs_lease_idx (and jobs_dedup_idx,
    // jobs_session_idx for the jobs that have a key or a session).
    direct_insert::Inserter updater;
    Datum worker;
    TimestampTz lease_until;
    // A take's history rows: the extras beside the job's own columns.
    bool keep;
    HistoryWriter history;
    Datum extras[kHistoryExtras];
    bool extra_nulls[kHistoryExtras];
    // A queue that has had packed jobs: its locked rows, and the row of hopper.jobs a packed job
    // becomes (a lease's running row, or the columns a take's history row copies).
    bool from_packed;
    packed_claim::Source packed;
    Datum* packed_values;
    bool* packed_nulls;
    // A window claim's other relations.
    limited_window::Source window;
};

// The next result row, in the caller's memory context (which is current).
Row& next_out(Claimer& c) {
    Request* r = c.r;
    if (r->claimed == r->capacity) {
        r->capacity *= 2;
        r->rows = static_cast<Row*>(repalloc(r->rows, sizeof(Row) * r->capacity));
    }
    return r->rows[r->claimed++];
}

// Claims a packed job, as the packed claim statements do: a lease inserts it into hopper.jobs as
// a running row, a take gives it a history row.
void claim_packed(Claimer& c, const packed_claim::Job& job) {
    Request* r = c.r;
    const packed_claim::Row& from = c.packed.rows[job.row];
    if (!c.take) ExecClearTuple(c.updater.slot);
    for (int a = 0; a < c.jd->natts; ++a) {
        c.packed_values[a] = (Datum)0;
        c.packed_nulls[a] = true;
    }
    auto set = [&](int col, Datum d, bool null) {
        c.packed_values[c.col[col] - 1] = d;
        c.packed_nulls[c.col[col] - 1] = null;
    };
    set(kId, Int64GetDatum(job.key.id), false);
    set(kQueue, c.queue, false);
    set(kState, ObjectIdGetDatum(c.done_state), false);
    set(kPriority, Int16GetDatum(from.priority), false);
    set(kRunAt, TimestampTzGetDatum(from.run_at), false);
    set(kAttempt, Int32GetDatum(1), false);
    set(kMaxAttempts, Int32GetDatum(from.max_attempts), false);
    set(kCreatedAt, TimestampTzGetDatum(from.created_at), false);
    set(kStartedAt, TimestampTzGetDatum(r->lease_at), false);
    set(kKind, from.kind, from.kind_null);
    set(kWorker, c.worker, r->worker == nullptr);
    set(kPayload, job.payload, false);
    int64 token = 0;
    if (c.take) {
        if (c.keep) {
            c.extras[kExtraAttempt] = Int32GetDatum(1);
            history_insert(&c.history, c.cid, c.packed_values, c.packed_nulls, c.extras,
                           c.extra_nulls);
        }
    } else {
        token = nextval_internal(c.t.lease_token, true);
        set(kLeaseToken, Int64GetDatum(token), false);
        set(kLeaseUntil, TimestampTzGetDatum(c.lease_until), false);
        set(kClaimedPid, Int32GetDatum(MyProcPid), false);
        set(kClaimedBackendStart, TimestampTzGetDatum(MyStartTimestamp), false);
        set(kSessionBound, BoolGetDatum(r->session_bound), false);
        TupleTableSlot* row = c.updater.slot;
        ExecStoreVirtualTuple(row);
        direct_insert::open_indexes_for(&c.updater, row);
        MemoryContext old = MemoryContextSwitchTo(GetPerTupleMemoryContext(c.updater.estate));
        ExecSimpleRelationInsert(c.updater.rri, c.updater.estate, row);
        MemoryContextSwitchTo(old);
        lease_rows::remember(RelationGetRelid(c.jobs), job.key.id, token, &row->tts_tid);
        ResetPerTupleExprContext(c.updater.estate);
        ExecClearTuple(row);
    }
    packed_claim::take(&c.packed);
    r->took_packed = true;

    MemoryContext old = MemoryContextSwitchTo(c.caller);
    Row& out = next_out(c);
    std::memset(out.nulls, 0, sizeof(out.nulls));
    out.values[0] = Int64GetDatum(job.key.id);
    out.values[1] = datumCopy(c.queue, false, -1);
    out.nulls[2] = from.kind_null;
    out.values[2] =
        from.kind_null ? (Datum)0 : copy_value(TupleDescAttr(c.jd, c.col[kKind] - 1), from.kind);
    out.values[3] = copy_value(TupleDescAttr(c.jd, c.col[kPayload] - 1), job.payload);
    out.values[4] = Int32GetDatum(1);
    int next = 5;
    if (!c.take) {
        out.values[next++] = Int64GetDatum(token);
        out.values[next++] = TimestampTzGetDatum(c.lease_until);
    }
    out.values[next++] = TimestampTzGetDatum(from.run_at);
    out.values[next] = TimestampTzGetDatum(from.created_at);
    out.key = job.key;
    MemoryContextSwitchTo(old);
}

// Claims the packed jobs that come before `key` in pull order (all of them: nullptr).
void claim_packed_before(Claimer& c, const claim_hint::Key* key) {
    while (c.r->claimed < c.r->n) {
        const packed_claim::Job* job = packed_claim::peek(&c.packed);
        if (job == nullptr || (key != nullptr && !claim_hint::before(job->key, *key))) return;
        claim_packed(c, *job);
    }
}

// Takes or leases the locked row: deletes it and writes its history row, or writes its leased
// version. Returns the lease's token (0 for a take).
int64 claim_locked(Claimer& c, int32 attempt) {
    Request* r = c.r;
    Datum* v = c.locked->tts_values;
    bool* isnull = c.locked->tts_isnull;
    if (c.take) {
        CheckCmdReplicaIdentity(c.jobs, CMD_DELETE);
        simple_table_tuple_delete(c.jobs, &c.locked->tts_tid, c.snap);
        if (c.keep) {
            c.extras[kExtraAttempt] = Int32GetDatum(attempt);
            history_insert(&c.history, c.cid, v, isnull, c.extras, c.extra_nulls);
        }
        return 0;
    }
    int64 token = nextval_internal(c.t.lease_token, true);
    TupleTableSlot* next = c.updater.slot;
    ExecClearTuple(next);
    std::memcpy(next->tts_values, v, sizeof(Datum) * c.jd->natts);
    std::memcpy(next->tts_isnull, isnull, sizeof(bool) * c.jd->natts);
    auto set = [&](int col, Datum d, bool null) {
        next->tts_values[c.col[col] - 1] = d;
        next->tts_isnull[c.col[col] - 1] = null;
    };
    set(kState, ObjectIdGetDatum(c.done_state), false);
    set(kAttempt, Int32GetDatum(attempt), false);
    set(kLeaseToken, Int64GetDatum(token), false);
    set(kLeaseUntil, TimestampTzGetDatum(c.lease_until), false);
    set(kStartedAt, TimestampTzGetDatum(r->lease_at), false);
    set(kWorker, c.worker, r->worker == nullptr);
    set(kClaimedPid, Int32GetDatum(MyProcPid), false);
    set(kClaimedBackendStart, TimestampTzGetDatum(MyStartTimestamp), false);
    set(kSessionBound, BoolGetDatum(r->session_bound), false);
    ExecStoreVirtualTuple(next);
    direct_insert::open_indexes_for(&c.updater, next);
    MemoryContext old = MemoryContextSwitchTo(GetPerTupleMemoryContext(c.updater.estate));
    ExecSimpleRelationUpdate(c.updater.rri, c.updater.estate, nullptr, c.locked, next);
    MemoryContextSwitchTo(old);
    lease_rows::remember(RelationGetRelid(c.jobs), DatumGetInt64(v[c.col[kId] - 1]), token,
                         &next->tts_tid);
    ResetPerTupleExprContext(c.updater.estate);
    return token;
}

// Claims the row in c.found if it is free and still due, after the packed jobs before it.
void claim_found(Claimer& c) {
    Request* r = c.r;
    CHECK_FOR_INTERRUPTS();
    if (c.from_packed) {
        bool isnull;
        claim_hint::Key key{DatumGetInt16(slot_getattr(c.found, c.col[kPriority], &isnull)),
                            DatumGetTimestampTz(slot_getattr(c.found, c.col[kRunAt], &isnull)),
                            DatumGetInt64(slot_getattr(c.found, c.col[kId], &isnull))};
        claim_packed_before(c, &key);
        if (r->claimed >= r->n) return;
    }
    if (held_by_other(c.found)) return;
    TM_FailureData tmfd;
    // FOR UPDATE SKIP LOCKED: a row locked by anyone else is passed over, and so is one
    // updated since the snapshot (TM_Updated), where EvalPlanQual would lock the newest
    // version and re-check it. That version is nearly always another worker's fresh lease,
    // which fails the re-check but kept the lock until this claim's commit, and the lease
    // holder's completion then waited for that commit's flush (Lock:transactionid in drains
    // pulling one job at a time; bench/ANALYSIS.md section 25). A row made available again
    // after the snapshot is left for the next claim, as one made available just after it is.
    TM_Result res = table_tuple_lock(c.jobs, &c.found->tts_tid, c.snap, c.locked, c.cid,
                                     LockTupleExclusive, LockWaitSkip, 0, &tmfd);
    if (res != TM_Ok) return;
    if (!still_due(c.locked, c.col, c.available, c.queue, c.idx->rd_indcollation[0], r->at,
                   r->start))
        return;

    slot_getallattrs(c.locked);
    Datum* v = c.locked->tts_values;
    bool* isnull = c.locked->tts_isnull;
    int32 attempt = DatumGetInt32(v[c.col[kAttempt] - 1]);
    // A job this transaction pushed, retried or unpacked is invisible to other claimers until
    // it commits, so they could not count it as in flight (include/hopper/limits.hpp).
    if (r->window) {
        bool xmin_null;
        Datum xmin = slot_getsysattr(c.locked, MinTransactionIdAttributeNumber, &xmin_null);
        if (!xmin_null && TransactionIdIsCurrentTransactionId(DatumGetTransactionId(xmin)))
            r->own_rows = true;
    }
    // A row written by hand may hold any count: the statements' attempt + 1 fails on it too.
    if (attempt == PG_INT32_MAX)
        ereport(ERROR,
                (errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE), errmsg("integer out of range")));
    attempt += 1;
    int64 token = claim_locked(c, attempt);

    MemoryContext old = MemoryContextSwitchTo(c.caller);
    Row& out = next_out(c);
    auto put = [&](int i, int col) {
        int a = c.col[col] - 1;
        out.nulls[i] = isnull[a];
        out.values[i] = isnull[a] ? (Datum)0 : copy_value(TupleDescAttr(c.jd, a), v[a]);
    };
    put(0, kId);
    out.values[1] = datumCopy(c.queue, false, -1);
    out.nulls[1] = false;
    put(2, kKind);
    put(3, kPayload);
    out.values[4] = Int32GetDatum(attempt);
    out.nulls[4] = false;
    if (c.take) {
        put(5, kRunAt);
        put(6, kCreatedAt);
    } else {
        out.values[5] = Int64GetDatum(token);
        out.values[6] = TimestampTzGetDatum(c.lease_until);
        out.nulls[5] = out.nulls[6] = false;
        put(7, kRunAt);
        put(8, kCreatedAt);
    }
    out.key = {DatumGetInt16(v[c.col[kPriority] - 1]), DatumGetTimestampTz(v[c.col[kRunAt] - 1]),
               DatumGetInt64(v[c.col[kId] - 1])};
    MemoryContextSwitchTo(old);
}

// Walks the queue's candidates in pull order, from the hint if there is one, claiming until n.
void claim_candidates(Claimer& c) {
    Request* r = c.r;
    bool scan_needed = true;
    claim_hint::Key resume{};
    const claim_hint::Key* from = r->start;
    // pull_index_as_expected() made sure the index is one the leaf walk can read.
    if (r->start != nullptr && r->n <= kWalkMaxJobs) {
        ItemPointerData tids[walk_candidates(kWalkMaxJobs)];
        leaf_walk::Walk w = leaf_walk::candidates(c.idx, c.queue, *r->start, r->at, c.snap, tids,
                                                  walk_candidates(r->n));
        IndexFetchTableData* fetch = table_index_fetch_begin(c.jobs);
        for (int i = 0; i < w.found && r->claimed < r->n; ++i) {
            bool call_again = false;
            bool all_dead = false;
            if (table_index_fetch_tuple(fetch, &tids[i], c.snap, c.found, &call_again, &all_dead))
                claim_found(c);
        }
        table_index_fetch_end(fetch);
        scan_needed = !w.exhausted;
        resume = w.next;
        from = &resume;
    }
    if (r->claimed < r->n && scan_needed) {
        ScanKeyData keys[3];
        ScanKeyData row[3];
        int nkeys = leaf_walk::scan_keys(c.idx, c.queue, from, r->at, keys, row);
        IndexScanDesc scan = index_beginscan(c.jobs, c.idx, c.snap, nkeys, 0);
        index_rescan(scan, keys, nkeys, nullptr, 0);
        while (r->claimed < r->n && index_getnext_slot(scan, ForwardScanDirection, c.found))
            claim_found(c);
        index_endscan(scan);
    }
    if (c.from_packed) claim_packed_before(c, nullptr);
}

// Leases the jobs the window picks, in pull order, as the window statement's UPDATE would: a
// pick locked by someone else, or changed since the snapshot, is passed over.
void claim_window(Claimer& c, const QueueRow& q) {
    Request* r = c.r;
    limited_window::Pull p{c.queue,           r->at,       r->n,          q.max_running,
                           q.key_max_running, r->inflight, r->n_inflight, c.available,
                           c.done_state,      r->start};
    auto* picks = static_cast<ItemPointerData*>(palloc(sizeof(ItemPointerData) * r->n));
    limited_window::Choice choice;
    if (!limited_window::choose(c.window, c.jobs, c.idx, c.col, p, c.snap, picks, &choice)) {
        r->unsettled = true;
        return;
    }
    r->passed = choice.passed;
    r->first_passed = choice.first_passed;
    for (int i = 0; i < choice.n_picks; ++i)
        if (table_tuple_fetch_row_version(c.jobs, &picks[i], c.snap, c.found)) claim_found(c);
    pfree(picks);
}

// Opens what the claim writes (c.jobs and c.idx are open): the history of a take, the packed rows
// of a queue that has had packed jobs. False, with those closed again, where the statement must
// claim.
bool open_writers(Claimer& c, const QueueRow& q) {
    c.keep = c.take && q.keeps;
    if (c.keep && !history_open(c.t.history, c.jobs, &c.history)) return false;
    // Packed jobs become rows with every column named (the table has no other live one), as the
    // statements name them.
    c.from_packed = q.packed;
    if (c.from_packed) {
        int live = 0;
        for (int a = 0; a < c.jd->natts; ++a) live += TupleDescAttr(c.jd, a)->attisdropped ? 0 : 1;
        if (live != kColumns || (!c.take && !may(c.t.jobs, ACL_INSERT)) ||
            !packed_claim::open(c.t.batches, c.t.batches_pull_index, &c.packed)) {
            if (c.keep) history_close(&c.history);
            return false;
        }
    }
    if (!c.take) {
        direct_insert::begin(c.jobs, &c.updater);
        c.updater.estate->es_snapshot = c.snap;
        // The columns a lease sets, as an UPDATE's range table names them: an index whose key
        // keeps its value (the primary key) gets the "unchanged" hint that lets the B-tree
        // delete old versions bottom-up, and one whose key changes (lease_until) does not.
        // Without it every index got the hint and each full page of jobs_lease_idx, whose
        // entries are all live, was searched for dead versions before it was split.
        RangeTblEntry* rte = exec_rt_fetch(c.updater.rri->ri_RangeTableIndex, c.updater.estate);
        for (int col : {kState, kAttempt, kLeaseToken, kLeaseUntil, kStartedAt, kWorker,
                        kClaimedPid, kClaimedBackendStart, kSessionBound})
            rte->updatedCols =
                bms_add_member(rte->updatedCols, c.col[col] - FirstLowInvalidHeapAttributeNumber);
    }
    if (c.from_packed) {
        if (c.take) {
            c.packed_values = static_cast<Datum*>(palloc(sizeof(Datum) * c.jd->natts));
            c.packed_nulls = static_cast<bool*>(palloc(sizeof(bool) * c.jd->natts));
        } else {
            c.packed_values = c.updater.slot->tts_values;
            c.packed_nulls = c.updater.slot->tts_isnull;
        }
    }
    return true;
}

// Plain C over PostgreSQL's API, run under pg_guard: no C++ object with a destructor lives here.
void claim_rows(void* arg) {
    Claimer c{};
    Request* r = c.r = static_cast<Request*>(arg);
    c.take = r->mode == Mode::kTake;
    r->usable = false;
    r->limited = false;
    r->unsettled = false;
    r->passed = false;
    r->took_packed = false;
    r->own_rows = false;
    r->claimed = 0;
    c.caller = CurrentMemoryContext;
    if (!find_tables(&c.t)) return;
    // What the statements need: FOR UPDATE, and the DELETE and history INSERT or the UPDATE.
    if (!may(c.t.queues, ACL_SELECT) ||
        (c.take
             ? !may(c.t.jobs, ACL_SELECT | ACL_UPDATE | ACL_DELETE) || !may(c.t.history, ACL_INSERT)
             : !may(c.t.jobs, ACL_SELECT | ACL_UPDATE)))
        return;

    // As an SPI statement would: see what came before in this transaction, on a new snapshot.
    CommandCounterIncrement();
    uint64_t generation = queue_rows::accept();
    PushActiveSnapshot(GetTransactionSnapshot());
    c.snap = GetActiveSnapshot();
    c.queue = PointerGetDatum(cstring_to_text_with_len(r->queue, r->queue_len));
    QueueRow q{};
    bool ok =
        queue_rows::lookup(c.t.queues, r->queue, r->queue_len, c.queue, c.snap, generation, &q);
    if (r->window) {
        // A queue whose limits went meanwhile is the statement's to sort out.
        if (!ok || (q.found && !q.paused && !q.limited)) {
            PopActiveSnapshot();
            return;
        }
        // Limited claims count and take rows of hopper.jobs alone (limits::enter() unpacked the
        // queue's packed jobs).
        q.packed = false;
    } else if (!ok || (q.found && !q.paused && q.limited)) {
        PopActiveSnapshot();
        r->limited = ok;
        return;  // the statement's markers tell the caller what to do
    }
    if (!q.found || q.paused) {
        PopActiveSnapshot();
        r->usable = true;  // nothing to claim, as the statement would find
        return;
    }

    c.jobs = open_table(c.t.jobs, RowExclusiveLock);
    if (c.jobs == nullptr) {
        PopActiveSnapshot();
        return;
    }
    c.jd = RelationGetDescr(c.jobs);
    ok = c.jobs->rd_rel->relkind == RELKIND_RELATION && !direct_insert::defers_to_sql(c.jobs);
    ok = ok && table_layout::attnums(c.jobs, kNames, kTypes, kColumns, c.col);
    if (ok) {
        Oid state_type = TupleDescAttr(c.jd, c.col[kState] - 1)->atttypid;
        c.available = enum_label(state_type, "available");
        c.done_state = enum_label(state_type, c.take ? "completed" : "running");
        ok = OidIsValid(c.available) && OidIsValid(c.done_state);
    }
    ok = ok && direct_access::lists_index(c.jobs, c.t.pull_index);
    c.idx = ok ? index_open(c.t.pull_index, AccessShareLock) : nullptr;
    ok = ok && pull_index_as_expected(c.idx, c.jobs, c.col, c.available);
    ok = ok && (!r->window || limited_window::open(c.jobs, c.col, &c.window));
    if (!ok || !open_writers(c, q)) {
        if (r->window) limited_window::close(&c.window);
        if (c.idx != nullptr) index_close(c.idx, NoLock);
        table_close(c.jobs, NoLock);
        PopActiveSnapshot();
        return;
    }

    c.found = table_slot_create(c.jobs, nullptr);
    c.locked = table_slot_create(c.jobs, nullptr);
    c.cid = GetCurrentCommandId(true);
    c.worker = r->worker != nullptr
                   ? PointerGetDatum(cstring_to_text_with_len(r->worker, r->worker_len))
                   : (Datum)0;
    // A lease is a fixed length (args::Duration): microseconds added, whatever the TimeZone.
    // lease_clock keeps lease_at a day short of the end of timestamptz's range.
    if (!c.take) c.lease_until = r->lease_at + r->lease_us.value_or(q.lease_us);
    c.extras[kExtraStartedAt] = TimestampTzGetDatum(r->lease_at);
    c.extras[kExtraWorker] = c.worker;
    c.extra_nulls[kExtraWorker] = r->worker == nullptr;
    c.extras[kExtraProgress] = Float4GetDatum(1.0f);
    c.extras[kExtraState] = ObjectIdGetDatum(c.done_state);
    c.extras[kExtraFinishedAt] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
    c.extra_nulls[kExtraResult] = true;
    if (c.from_packed) packed_claim::lock_rows(&c.packed, c.queue, r->at, c.snap, c.cid, r->n);

    if (r->window)
        claim_window(c, q);
    else
        claim_candidates(c);

    if (c.from_packed) packed_claim::finish(&c.packed, c.snap);
    if (r->window) limited_window::close(&c.window);
    ExecDropSingleTupleTableSlot(c.locked);
    ExecDropSingleTupleTableSlot(c.found);
    index_close(c.idx, NoLock);
    if (c.keep) history_close(&c.history);
    if (c.take)
        table_close(c.jobs, NoLock);
    else
        direct_insert::end(c.jobs, &c.updater, false);
    PopActiveSnapshot();
    // What follows in this transaction sees the claim, as after an SPI statement.
    if (r->claimed > 0) CommandCounterIncrement();
    r->usable = true;
    r->notify_done = q.notify_done;
}

std::optional<Claimed> run(Request& r, const Claim& claim) {
    r.queue = claim.queue.data();
    r.queue_len = static_cast<int>(claim.queue.size());
    r.n = claim.n;
    r.at = claim.at;
    // A take's job starts at its clock, but never later than the real time: a take dated ahead
    // (`at`, to find jobs due later) did not start in the future, and its history row would
    // otherwise show a start after its finish.
    r.lease_at = r.mode == Mode::kLease ? args::lease_clock(claim.at)
                                        : std::min(claim.at, GetCurrentTimestamp());
    r.start = claim.start;
    r.worker = claim.worker ? claim.worker->data() : nullptr;
    r.worker_len = claim.worker ? static_cast<int>(claim.worker->size()) : 0;
    r.capacity = static_cast<int>(claim.n < 16 ? claim.n : 16);
    r.rows = pg_guard([&] { return static_cast<Row*>(palloc(sizeof(Row) * r.capacity)); });
    detail::guarded_call(claim_rows, &r);
    if (r.limited && r.mode == Mode::kLease) {
        Claimed c;
        c.limited = true;
        return c;
    }
    if (!r.usable) return std::nullopt;
    Claimed c;
    c.unsettled = r.unsettled;
    if (r.passed) c.first_passed = r.first_passed;
    c.notify_done = r.notify_done;
    c.took_packed = r.took_packed;
    c.own_rows = r.own_rows;
    c.rows.assign(r.rows, r.rows + r.claimed);
    return c;
}

}  // namespace

std::optional<Claimed> take(const Claim& claim) {
    Request r{};
    r.mode = Mode::kTake;
    return run(r, claim);
}

std::optional<Claimed> lease(const Claim& claim, std::optional<int64_t> lease_us,
                             bool session_bound) {
    Request r{};
    r.mode = Mode::kLease;
    r.lease_us = lease_us;
    r.session_bound = session_bound;
    return run(r, claim);
}

std::optional<Claimed> lease_window(const Claim& claim, std::optional<int64_t> lease_us,
                                    bool session_bound, const std::vector<int64_t>& inflight) {
    Request r{};
    r.mode = Mode::kLease;
    r.lease_us = lease_us;
    r.session_bound = session_bound;
    r.window = true;
    r.inflight = reinterpret_cast<const int64*>(inflight.data());
    r.n_inflight = static_cast<int>(inflight.size());
    return run(r, claim);
}

}  // namespace hopper::direct_claim
