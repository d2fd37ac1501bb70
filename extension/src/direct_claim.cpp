// See include/hopper/direct_claim.hpp.
#include <cstring>

#include "hopper/boundary.hpp"
#include "hopper/direct_access.hpp"
#include "hopper/direct_claim.hpp"
#include "hopper/direct_insert.hpp"
#include "hopper/leaf_walk.hpp"
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
    const Interval* lease;  // nullptr: the queue's
    bool session_bound;

    bool usable;
    bool notify_done;
    bool took_packed;
    int claimed;
    int capacity;
    Row* rows;  // palloc'd in the caller's memory context
};

// Whether jobs_pull_idx is the index the scan keys below are built for: btree, valid, on
// (queue text, priority smallint, run_at timestamptz, id bigint).
bool pull_index_as_expected(Relation idx, Relation jobs, const int* col) {
    Form_pg_index ix = idx->rd_index;
    if (idx->rd_rel->relam != BTREE_AM_OID || ix->indrelid != RelationGetRelid(jobs) ||
        !ix->indisvalid || !ix->indisready || ix->indnkeyatts != 4)
        return false;
    const int keys[4] = {col[kQueue], col[kPriority], col[kRunAt], col[kId]};
    const Oid types[4] = {TEXTOID, INT2OID, TIMESTAMPTZOID, INT8OID};
    TupleDesc desc = RelationGetDescr(jobs);
    for (int i = 0; i < 4; ++i)
        if (ix->indkey.values[i] != keys[i] ||
            TupleDescAttr(desc, keys[i] - 1)->atttypid != types[i])
            return false;
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

// queue = $1, [(priority, run_at, id) >= start,] run_at <= at: the statements' index conditions,
// in index column order, each with the index column's collation. `row` holds the row comparison's
// members and must outlive the scan.
int scan_keys(Relation idx, Datum queue, const claim_hint::Key* start, TimestampTz at,
              ScanKeyData* keys, ScanKeyData* row) {
    int nkeys = 0;
    ScanKeyEntryInitialize(&keys[nkeys++], 0, 1, BTEqualStrategyNumber, InvalidOid,
                           idx->rd_indcollation[0], F_TEXTEQ, queue);
    if (start != nullptr) {
        const Datum values[3] = {Int16GetDatum(start->priority), TimestampTzGetDatum(start->run_at),
                                 Int64GetDatum(start->id)};
        for (int i = 0; i < 3; ++i)
            ScanKeyEntryInitialize(&row[i], SK_ROW_MEMBER | (i == 2 ? SK_ROW_END : 0), i + 2,
                                   BTGreaterEqualStrategyNumber, InvalidOid,
                                   idx->rd_indcollation[i + 1],
                                   index_getprocid(idx, i + 2, BTORDER_PROC), values[i]);
        ScanKeyEntryInitialize(&keys[nkeys++], SK_ROW_HEADER, 2, BTGreaterEqualStrategyNumber,
                               InvalidOid, idx->rd_indcollation[1], InvalidOid,
                               PointerGetDatum(row));
    }
    ScanKeyEntryInitialize(&keys[nkeys++], 0, 3, BTLessEqualStrategyNumber, InvalidOid,
                           idx->rd_indcollation[2], F_TIMESTAMPTZ_LE, TimestampTzGetDatum(at));
    return nkeys;
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

// Plain C over PostgreSQL's API, run under pg_guard: no C++ object with a destructor lives here.
void claim_rows(void* arg) {
    Request* r = static_cast<Request*>(arg);
    bool take = r->mode == Mode::kTake;
    r->usable = false;
    r->took_packed = false;
    r->claimed = 0;
    MemoryContext caller = CurrentMemoryContext;
    Tables t;
    if (!find_tables(&t)) return;
    // What the statements need: FOR UPDATE, and the DELETE and history INSERT or the UPDATE.
    if (!may(t.queues, ACL_SELECT) ||
        (take ? !may(t.jobs, ACL_SELECT | ACL_UPDATE | ACL_DELETE) || !may(t.history, ACL_INSERT)
              : !may(t.jobs, ACL_SELECT | ACL_UPDATE)))
        return;

    // As an SPI statement would: see what came before in this transaction, on a new snapshot.
    CommandCounterIncrement();
    uint64_t generation = queue_rows::accept();
    QueueRow q{};
    bool ok = queue_rows::recall(r->queue, r->queue_len, &q);
    PushActiveSnapshot(GetTransactionSnapshot());
    Snapshot snap = GetActiveSnapshot();
    Datum queue = PointerGetDatum(cstring_to_text_with_len(r->queue, r->queue_len));

    if (!ok) {
        QueueTable queues;
        ok = open_queues(t.queues, &queues);
        if (ok) {
            read_queue(queues, queue, snap, &q);
            close_queues(&queues);
            queue_rows::remember(t.queues, r->queue, r->queue_len, q, generation);
        }
    }
    if (!ok || (q.found && !q.paused && q.limited)) {
        PopActiveSnapshot();
        return;  // the statement's markers tell the caller what to do
    }
    if (!q.found || q.paused) {
        PopActiveSnapshot();
        r->usable = true;  // nothing to claim, as the statement would find
        return;
    }

    Relation jobs = table_open(t.jobs, RowExclusiveLock);
    TupleDesc jd = RelationGetDescr(jobs);
    int col[kColumns];
    ok = jobs->rd_rel->relkind == RELKIND_RELATION && !direct_insert::defers_to_sql(jobs);
    ok = ok && table_layout::attnums(jobs, kNames, kColumns, col);
    Oid available = InvalidOid;
    Oid done_state = InvalidOid;  // completed (take) or running (lease)
    if (ok) {
        Oid state_type = TupleDescAttr(jd, col[kState] - 1)->atttypid;
        available = enum_label(state_type, "available");
        done_state = enum_label(state_type, take ? "completed" : "running");
        ok = OidIsValid(available) && OidIsValid(done_state);
    }
    Relation idx = index_open(t.pull_index, AccessShareLock);
    ok = ok && pull_index_as_expected(idx, jobs, col);

    HistoryWriter history{};
    bool keep = ok && take && q.keeps;
    if (keep) ok = history_open(t.history, jobs, &history);

    // A queue that has had packed jobs: a lease inserts the ones it takes as rows of their own, a
    // take gives their history rows the job's columns, every column named (the table has no
    // other live one) as the statements name them.
    packed_claim::Source packed{};
    bool from_packed = ok && q.packed;
    if (from_packed) {
        int live = 0;
        for (int a = 0; a < jd->natts; ++a) live += TupleDescAttr(jd, a)->attisdropped ? 0 : 1;
        ok = live == kColumns && (take || may(t.jobs, ACL_INSERT)) &&
             packed_claim::open(t.batches, t.batches_pull_index, &packed);
        if (!ok && keep) history_close(&history);
    }
    if (!ok) {
        index_close(idx, NoLock);
        table_close(jobs, NoLock);
        PopActiveSnapshot();
        return;
    }

    // A lease updates the row through a result relation of its own, with the indexes the new
    // version goes into: the primary key and jobs_lease_idx (and jobs_dedup_idx, jobs_session_idx
    // for the jobs that have a key or a session).
    direct_insert::Inserter updater{};
    if (!take) {
        direct_insert::begin(jobs, &updater);
        updater.estate->es_snapshot = snap;
        // The columns a lease sets, as an UPDATE's range table names them: an index whose key
        // keeps its value (the primary key) gets the "unchanged" hint that lets the B-tree
        // delete old versions bottom-up, and one whose key changes (lease_until) does not.
        // Without it every index got the hint and each full page of jobs_lease_idx, whose
        // entries are all live, was searched for dead versions before it was split.
        RangeTblEntry* rte = exec_rt_fetch(updater.rri->ri_RangeTableIndex, updater.estate);
        for (int c : {kState, kAttempt, kLeaseToken, kLeaseUntil, kStartedAt, kWorker, kClaimedPid,
                      kClaimedBackendStart, kSessionBound})
            rte->updatedCols =
                bms_add_member(rte->updatedCols, col[c] - FirstLowInvalidHeapAttributeNumber);
    }
    TupleTableSlot* found = table_slot_create(jobs, nullptr);
    TupleTableSlot* locked = table_slot_create(jobs, nullptr);
    CommandId cid = GetCurrentCommandId(true);
    Datum worker = r->worker != nullptr
                       ? PointerGetDatum(cstring_to_text_with_len(r->worker, r->worker_len))
                       : (Datum)0;
    TimestampTz lease_until = 0;
    if (!take)
        lease_until = DatumGetTimestampTz(
            DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(r->at),
                                IntervalPGetDatum(r->lease != nullptr ? r->lease : &q.lease)));
    Datum extras[kHistoryExtras];
    bool extra_nulls[kHistoryExtras] = {};
    extras[kExtraStartedAt] = TimestampTzGetDatum(r->at);
    extras[kExtraWorker] = worker;
    extra_nulls[kExtraWorker] = r->worker == nullptr;
    extras[kExtraProgress] = Float4GetDatum(1.0f);
    extras[kExtraState] = ObjectIdGetDatum(done_state);
    extras[kExtraFinishedAt] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
    extras[kExtraResult] = (Datum)0;
    extra_nulls[kExtraResult] = true;

    if (from_packed) packed_claim::lock_rows(&packed, queue, r->at, snap, cid, r->n);

    // The next result row, in the caller's memory context (which is current).
    auto next_out = [&]() -> Row& {
        if (r->claimed == r->capacity) {
            r->capacity *= 2;
            r->rows = static_cast<Row*>(repalloc(r->rows, sizeof(Row) * r->capacity));
        }
        return r->rows[r->claimed++];
    };

    // A packed job as a row of hopper.jobs: inserted as a lease's running row, or given to its
    // history row by a take, as the packed claim statements write them.
    Datum* packed_values = nullptr;
    bool* packed_nulls = nullptr;
    if (from_packed && take) {
        packed_values = static_cast<Datum*>(palloc(sizeof(Datum) * jd->natts));
        packed_nulls = static_cast<bool*>(palloc(sizeof(bool) * jd->natts));
    } else if (from_packed) {
        packed_values = updater.slot->tts_values;
        packed_nulls = updater.slot->tts_isnull;
    }
    auto claim_packed = [&](const packed_claim::Job& job) {
        const packed_claim::Row& from = packed.rows[job.row];
        if (!take) ExecClearTuple(updater.slot);
        for (int a = 0; a < jd->natts; ++a) {
            packed_values[a] = (Datum)0;
            packed_nulls[a] = true;
        }
        auto set = [&](int c, Datum d, bool null) {
            packed_values[col[c] - 1] = d;
            packed_nulls[col[c] - 1] = null;
        };
        set(kId, Int64GetDatum(job.key.id), false);
        set(kQueue, queue, false);
        set(kState, ObjectIdGetDatum(done_state), false);
        set(kPriority, Int16GetDatum(from.priority), false);
        set(kRunAt, TimestampTzGetDatum(from.run_at), false);
        set(kAttempt, Int32GetDatum(1), false);
        set(kMaxAttempts, Int32GetDatum(from.max_attempts), false);
        set(kCreatedAt, TimestampTzGetDatum(from.created_at), false);
        set(kStartedAt, TimestampTzGetDatum(r->at), false);
        set(kKind, from.kind, from.kind_null);
        set(kWorker, worker, r->worker == nullptr);
        set(kPayload, job.payload, false);
        int64 token = 0;
        if (take) {
            if (keep) {
                extras[kExtraAttempt] = Int32GetDatum(1);
                history_insert(&history, cid, packed_values, packed_nulls, extras, extra_nulls);
            }
        } else {
            token = nextval_internal(t.lease_token, true);
            set(kLeaseToken, Int64GetDatum(token), false);
            set(kLeaseUntil, TimestampTzGetDatum(lease_until), false);
            set(kClaimedPid, Int32GetDatum(MyProcPid), false);
            set(kClaimedBackendStart, TimestampTzGetDatum(MyStartTimestamp), false);
            set(kSessionBound, BoolGetDatum(r->session_bound), false);
            TupleTableSlot* row = updater.slot;
            ExecStoreVirtualTuple(row);
            direct_insert::open_indexes_for(&updater, row);
            MemoryContext old = MemoryContextSwitchTo(GetPerTupleMemoryContext(updater.estate));
            ExecSimpleRelationInsert(updater.rri, updater.estate, row);
            MemoryContextSwitchTo(old);
            lease_rows::remember(RelationGetRelid(jobs), job.key.id, token, &row->tts_tid);
            ResetPerTupleExprContext(updater.estate);
            ExecClearTuple(row);
        }
        packed_claim::take(&packed);
        r->took_packed = true;

        MemoryContext old = MemoryContextSwitchTo(caller);
        Row& out = next_out();
        std::memset(out.nulls, 0, sizeof(out.nulls));
        out.values[0] = Int64GetDatum(job.key.id);
        out.values[1] = datumCopy(queue, false, -1);
        out.nulls[2] = from.kind_null;
        out.values[2] =
            from.kind_null ? (Datum)0 : copy_value(TupleDescAttr(jd, col[kKind] - 1), from.kind);
        out.values[3] = copy_value(TupleDescAttr(jd, col[kPayload] - 1), job.payload);
        out.values[4] = Int32GetDatum(1);
        int next = 5;
        if (!take) {
            out.values[next++] = Int64GetDatum(token);
            out.values[next++] = TimestampTzGetDatum(lease_until);
        }
        out.values[next++] = TimestampTzGetDatum(from.run_at);
        out.values[next] = TimestampTzGetDatum(from.created_at);
        out.key = job.key;
        MemoryContextSwitchTo(old);
    };
    // Claims the packed jobs that come before `key` in pull order (all of them: nullptr).
    auto claim_packed_before = [&](const claim_hint::Key* key) {
        while (r->claimed < r->n) {
            const packed_claim::Job* job = packed_claim::peek(&packed);
            if (job == nullptr || (key != nullptr && !packed_claim::before(job->key, *key))) return;
            claim_packed(*job);
        }
    };

    // Claims the row in `found` if it is free and still due.
    auto claim_found = [&] {
        CHECK_FOR_INTERRUPTS();
        if (from_packed) {
            bool isnull;
            claim_hint::Key key{DatumGetInt16(slot_getattr(found, col[kPriority], &isnull)),
                                DatumGetTimestampTz(slot_getattr(found, col[kRunAt], &isnull)),
                                DatumGetInt64(slot_getattr(found, col[kId], &isnull))};
            claim_packed_before(&key);
            if (r->claimed >= r->n) return;
        }
        if (held_by_other(found)) return;
        TM_FailureData tmfd;
        // FOR UPDATE SKIP LOCKED: a row locked by anyone else is passed over, and so is one
        // updated since the snapshot (TM_Updated), where EvalPlanQual would lock the newest
        // version and re-check it. That version is nearly always another worker's fresh lease,
        // which fails the re-check but kept the lock until this claim's commit, and the lease
        // holder's completion then waited for that commit's flush (Lock:transactionid in drains
        // pulling one job at a time; bench/ANALYSIS.md section 25). A row made available again
        // after the snapshot is left for the next claim, as one made available just after it is.
        TM_Result res = table_tuple_lock(jobs, &found->tts_tid, snap, locked, cid,
                                         LockTupleExclusive, LockWaitSkip, 0, &tmfd);
        if (res != TM_Ok) return;
        if (!still_due(locked, col, available, queue, idx->rd_indcollation[0], r->at, r->start))
            return;

        slot_getallattrs(locked);
        Datum* v = locked->tts_values;
        bool* isnull = locked->tts_isnull;
        int32 attempt = DatumGetInt32(v[col[kAttempt] - 1]) + 1;
        int64 token = 0;
        if (take) {
            CheckCmdReplicaIdentity(jobs, CMD_DELETE);
            simple_table_tuple_delete(jobs, &locked->tts_tid, snap);
            if (keep) {
                extras[kExtraAttempt] = Int32GetDatum(attempt);
                history_insert(&history, cid, v, isnull, extras, extra_nulls);
            }
        } else {
            token = nextval_internal(t.lease_token, true);
            TupleTableSlot* next = updater.slot;
            ExecClearTuple(next);
            std::memcpy(next->tts_values, v, sizeof(Datum) * jd->natts);
            std::memcpy(next->tts_isnull, isnull, sizeof(bool) * jd->natts);
            auto set = [&](int c, Datum d, bool null) {
                next->tts_values[col[c] - 1] = d;
                next->tts_isnull[col[c] - 1] = null;
            };
            set(kState, ObjectIdGetDatum(done_state), false);
            set(kAttempt, Int32GetDatum(attempt), false);
            set(kLeaseToken, Int64GetDatum(token), false);
            set(kLeaseUntil, TimestampTzGetDatum(lease_until), false);
            set(kStartedAt, TimestampTzGetDatum(r->at), false);
            set(kWorker, worker, r->worker == nullptr);
            set(kClaimedPid, Int32GetDatum(MyProcPid), false);
            set(kClaimedBackendStart, TimestampTzGetDatum(MyStartTimestamp), false);
            set(kSessionBound, BoolGetDatum(r->session_bound), false);
            ExecStoreVirtualTuple(next);
            direct_insert::open_indexes_for(&updater, next);
            MemoryContext old = MemoryContextSwitchTo(GetPerTupleMemoryContext(updater.estate));
            ExecSimpleRelationUpdate(updater.rri, updater.estate, nullptr, locked, next);
            MemoryContextSwitchTo(old);
            lease_rows::remember(RelationGetRelid(jobs), DatumGetInt64(v[col[kId] - 1]), token,
                                 &next->tts_tid);
            ResetPerTupleExprContext(updater.estate);
        }

        MemoryContext old = MemoryContextSwitchTo(caller);
        Row& out = next_out();
        auto put = [&](int i, int c) {
            int a = col[c] - 1;
            out.nulls[i] = isnull[a];
            out.values[i] = isnull[a] ? (Datum)0 : copy_value(TupleDescAttr(jd, a), v[a]);
        };
        put(0, kId);
        out.values[1] = datumCopy(queue, false, -1);
        out.nulls[1] = false;
        put(2, kKind);
        put(3, kPayload);
        out.values[4] = Int32GetDatum(attempt);
        out.nulls[4] = false;
        if (take) {
            put(5, kRunAt);
            put(6, kCreatedAt);
        } else {
            out.values[5] = Int64GetDatum(token);
            out.values[6] = TimestampTzGetDatum(lease_until);
            out.nulls[5] = out.nulls[6] = false;
            put(7, kRunAt);
            put(8, kCreatedAt);
        }
        out.key = {DatumGetInt16(v[col[kPriority] - 1]), DatumGetTimestampTz(v[col[kRunAt] - 1]),
                   DatumGetInt64(v[col[kId] - 1])};
        MemoryContextSwitchTo(old);
    };

    bool scan_needed = true;
    claim_hint::Key resume{};
    const claim_hint::Key* from = r->start;
    if (r->start != nullptr && r->n <= kWalkMaxJobs && leaf_walk::usable(idx)) {
        ItemPointerData tids[walk_candidates(kWalkMaxJobs)];
        leaf_walk::Walk w =
            leaf_walk::candidates(idx, queue, *r->start, r->at, snap, tids, walk_candidates(r->n));
        IndexFetchTableData* fetch = table_index_fetch_begin(jobs);
        for (int i = 0; i < w.found && r->claimed < r->n; ++i) {
            bool call_again = false;
            bool all_dead = false;
            if (table_index_fetch_tuple(fetch, &tids[i], snap, found, &call_again, &all_dead))
                claim_found();
        }
        table_index_fetch_end(fetch);
        scan_needed = !w.exhausted;
        resume = w.next;
        from = &resume;
    }
    if (r->claimed < r->n && scan_needed) {
        ScanKeyData keys[3];
        ScanKeyData row[3];
        int nkeys = scan_keys(idx, queue, from, r->at, keys, row);
        IndexScanDesc scan = index_beginscan(jobs, idx, snap, nkeys, 0);
        index_rescan(scan, keys, nkeys, nullptr, 0);
        while (r->claimed < r->n && index_getnext_slot(scan, ForwardScanDirection, found))
            claim_found();
        index_endscan(scan);
    }

    if (from_packed) {
        claim_packed_before(nullptr);
        packed_claim::finish(&packed, snap);
    }
    ExecDropSingleTupleTableSlot(locked);
    ExecDropSingleTupleTableSlot(found);
    index_close(idx, NoLock);
    if (keep) history_close(&history);
    if (take)
        table_close(jobs, NoLock);
    else
        direct_insert::end(jobs, &updater, false);
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
    r.start = claim.start;
    r.worker = claim.worker ? claim.worker->data() : nullptr;
    r.worker_len = claim.worker ? static_cast<int>(claim.worker->size()) : 0;
    r.capacity = static_cast<int>(claim.n < 16 ? claim.n : 16);
    r.rows = pg_guard([&] { return static_cast<Row*>(palloc(sizeof(Row) * r.capacity)); });
    detail::guarded_call(claim_rows, &r);
    if (!r.usable) return std::nullopt;
    Claimed c;
    c.notify_done = r.notify_done;
    c.took_packed = r.took_packed;
    c.rows.assign(r.rows, r.rows + r.claimed);
    return c;
}

}  // namespace

std::optional<Claimed> take(const Claim& claim) {
    Request r{};
    r.mode = Mode::kTake;
    return run(r, claim);
}

std::optional<Claimed> lease(const Claim& claim, const std::optional<Interval>& lease,
                             bool session_bound) {
    Request r{};
    r.mode = Mode::kLease;
    r.lease = lease ? &*lease : nullptr;
    r.session_bound = session_bound;
    return run(r, claim);
}

}  // namespace hopper::direct_claim
