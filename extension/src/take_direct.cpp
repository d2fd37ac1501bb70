// See include/hopper/take_direct.hpp.
#include <cstring>

#include "hopper/boundary.hpp"
#include "hopper/take_direct.hpp"

extern "C" {
#include "access/detoast.h"
#include "access/genam.h"
#include "access/nbtree.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_enum.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/execPartition.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
}

namespace hopper::take_direct {
namespace {

// The hopper.jobs columns a take reads.
enum JobColumn {
    kId,
    kQueue,
    kState,
    kPriority,
    kRunAt,
    kAttempt,
    kMaxAttempts,
    kCreatedAt,
    kKind,
    kDedupKey,
    kConcurrencyKey,
    kLastError,
    kErrors,
    kProgressDetail,
    kPayload,
    kJobColumns
};
constexpr const char* kJobColumnNames[kJobColumns] = {
    "id",           "queue",           "state",  "priority",  "run_at",          "attempt",
    "max_attempts", "created_at",      "kind",   "dedup_key", "concurrency_key", "last_error",
    "errors",       "progress_detail", "payload"};

// Where a hopper.job_history column's value comes from: the job's own column, or what the take
// adds (as HOPPER_HISTORY_INSERT and the take statement's `kept` write them).
enum class Source {
    kJob,
    kNextAttempt,
    kStartedAt,
    kWorker,
    kProgress,
    kState,
    kFinishedAt,
    kNull
};
struct HistoryColumn {
    Source source;
    int job_column;  // for Source::kJob
};
constexpr int kMaxHistoryColumns = 32;

struct Request {
    const char* queue;
    int queue_len;
    int64_t n;
    TimestampTz at;
    const claim_hint::Key* start;
    const char* worker;  // nullptr: none
    int worker_len;

    bool usable;
    bool notify_done;
    int taken;
    int capacity;
    Row* rows;  // palloc'd in the caller's memory context
};

int attnum_of(TupleDesc desc, const char* name) {
    for (int i = 0; i < desc->natts; ++i) {
        Form_pg_attribute att = TupleDescAttr(desc, i);
        if (!att->attisdropped && std::strcmp(NameStr(att->attname), name) == 0) return i + 1;
    }
    return 0;
}

Oid enum_label(Oid type, const char* label) {
    return GetSysCacheOid2(ENUMTYPOIDNAME, Anum_pg_enum_oid, ObjectIdGetDatum(type),
                           CStringGetDatum(label));
}

bool may(Oid relid, AclMode mode) {
    return pg_class_aclmask(relid, GetUserId(), mode, ACLMASK_ALL) == mode;
}

// What the take statement's `q` reads of the queue.
struct QueueRow {
    bool found;
    bool paused;
    bool limited;
    bool packed;
    bool notify_done;
    bool keeps;  // retention > 0: finished jobs go to history
};

// Reads the queue's row through its primary key. False: the table is not as expected.
bool read_queue(Relation queues, Datum name, Snapshot snap, QueueRow* q) {
    TupleDesc desc = RelationGetDescr(queues);
    int name_col = attnum_of(desc, "name");
    int paused = attnum_of(desc, "paused");
    int limited = attnum_of(desc, "limited");
    int packed = attnum_of(desc, "packed");
    int notify_done = attnum_of(desc, "notify_done");
    int retention = attnum_of(desc, "retention");
    Oid pkey = RelationGetPrimaryKeyIndex(queues);
    if (!name_col || !paused || !limited || !packed || !notify_done || !retention ||
        !OidIsValid(pkey))
        return false;
    Relation idx = index_open(pkey, AccessShareLock);
    if (idx->rd_index->indnkeyatts != 1 || idx->rd_index->indkey.values[0] != name_col) {
        index_close(idx, AccessShareLock);
        return false;
    }
    // The index's own collation: the scan's descent compares with it.
    ScanKeyData key;
    ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid, idx->rd_indcollation[0],
                           F_TEXTEQ, name);
    IndexScanDesc scan = index_beginscan(queues, idx, snap, 1, 0);
    index_rescan(scan, &key, 1, nullptr, 0);
    TupleTableSlot* slot = table_slot_create(queues, nullptr);
    q->found = index_getnext_slot(scan, ForwardScanDirection, slot);
    if (q->found) {
        bool isnull;
        auto flag = [&](int col) {
            Datum d = slot_getattr(slot, col, &isnull);
            return !isnull && DatumGetBool(d);
        };
        q->paused = flag(paused);
        q->limited = flag(limited);
        q->packed = flag(packed);
        q->notify_done = flag(notify_done);
        Datum r = slot_getattr(slot, retention, &isnull);
        Interval zero{0, 0, 0};
        q->keeps =
            !isnull && DatumGetBool(DirectFunctionCall2(interval_gt, r, IntervalPGetDatum(&zero)));
    }
    ExecDropSingleTupleTableSlot(slot);
    index_endscan(scan);
    index_close(idx, NoLock);
    return true;
}

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

// Maps every column of hopper.job_history to its source. False: a column the take does not know
// (only the SQL INSERT can fill it), or a job column of another type.
bool map_history(TupleDesc hist, TupleDesc jobs, const int* col, HistoryColumn* map) {
    if (hist->natts > kMaxHistoryColumns) return false;
    for (int i = 0; i < hist->natts; ++i) {
        Form_pg_attribute att = TupleDescAttr(hist, i);
        map[i] = {Source::kNull, -1};
        if (att->attisdropped) continue;
        const char* name = NameStr(att->attname);
        auto is = [&](const char* n) { return std::strcmp(name, n) == 0; };
        if (is("attempt")) {
            map[i].source = Source::kNextAttempt;
        } else if (is("started_at")) {
            map[i].source = Source::kStartedAt;
        } else if (is("worker")) {
            map[i].source = Source::kWorker;
        } else if (is("progress")) {
            map[i].source = Source::kProgress;
        } else if (is("state")) {
            map[i].source = Source::kState;
        } else if (is("finished_at")) {
            map[i].source = Source::kFinishedAt;
        } else if (is("result")) {
            map[i].source = Source::kNull;
        } else {
            int c = 0;
            while (c < kJobColumns && (c == kState || c == kAttempt || !is(kJobColumnNames[c])))
                ++c;
            if (c == kJobColumns) return false;
            if (TupleDescAttr(jobs, col[c] - 1)->atttypid != att->atttypid) return false;
            map[i] = {Source::kJob, c};
        }
    }
    return true;
}

// A copy of a varlena value in the current memory context, detoasted: the row it came from is
// deleted by the take.
Datum copy_varlena(Datum d) {
    auto* v = reinterpret_cast<struct varlena*>(DatumGetPointer(d));
    if (VARATT_IS_EXTENDED(v)) return PointerGetDatum(detoast_attr(v));
    return datumCopy(d, false, -1);
}

// The history rows' result relation, routed to the partition of their finished_at as the SQL
// INSERT would (and as logical replication routes rows).
struct HistoryWriter {
    EState* estate;
    ResultRelInfo* root;
    ModifyTableState* mtstate;
    PartitionTupleRouting* proute;  // nullptr: history is a plain table
    TupleTableSlot* slot;
};

void history_begin(Relation hist, CommandId cid, HistoryWriter* w) {
    w->estate = CreateExecutorState();
    MemoryContext old = MemoryContextSwitchTo(w->estate->es_query_cxt);
    RangeTblEntry* rte = makeNode(RangeTblEntry);
    rte->rtekind = RTE_RELATION;
    rte->relid = RelationGetRelid(hist);
    rte->relkind = hist->rd_rel->relkind;
    rte->rellockmode = RowExclusiveLock;
    rte->requiredPerms = ACL_INSERT;
    ExecInitRangeTable(w->estate, list_make1(rte));
    w->estate->es_output_cid = cid;
    w->root = makeNode(ResultRelInfo);
    InitResultRelInfo(w->root, hist, 1, nullptr, 0);
    w->proute = nullptr;
    w->mtstate = nullptr;
    if (hist->rd_rel->relkind == RELKIND_PARTITIONED_TABLE) {
        w->mtstate = makeNode(ModifyTableState);
        w->mtstate->ps.plan = nullptr;
        w->mtstate->ps.state = w->estate;
        w->mtstate->operation = CMD_INSERT;
        w->mtstate->resultRelInfo = w->root;
        w->mtstate->rootResultRelInfo = w->root;
        w->proute = ExecSetupPartitionTupleRouting(w->estate, hist);
    } else {
        ExecOpenIndices(w->root, false);
    }
    w->slot = ExecInitExtraTupleSlot(w->estate, RelationGetDescr(hist), &TTSOpsVirtual);
    MemoryContextSwitchTo(old);
    // A partition may have row triggers of its own; their AFTER events fire at the end.
    AfterTriggerBeginQuery();
}

void history_insert(HistoryWriter* w) {
    ExecStoreVirtualTuple(w->slot);
    MemoryContext old = MemoryContextSwitchTo(GetPerTupleMemoryContext(w->estate));
    ResultRelInfo* target = w->root;
    TupleTableSlot* slot = w->slot;
    if (w->proute != nullptr) {
        target = ExecFindPartition(w->mtstate, w->root, w->proute, w->slot, w->estate);
        if (target->ri_RootToPartitionMap != nullptr)
            slot = execute_attr_map_slot(target->ri_RootToPartitionMap->attrMap, w->slot,
                                         target->ri_PartitionTupleSlot);
    }
    ExecSimpleRelationInsert(target, w->estate, slot);
    MemoryContextSwitchTo(old);
    ExecClearTuple(w->slot);
    ResetPerTupleExprContext(w->estate);
}

void history_end(HistoryWriter* w) {
    AfterTriggerEndQuery(w->estate);
    if (w->proute != nullptr)
        ExecCleanupTupleRouting(w->mtstate, w->proute);
    else
        ExecCloseIndices(w->root);
    // The partitions that firing AFTER triggers opened for themselves.
    ExecCloseResultRelations(w->estate);
    ExecResetTupleTable(w->estate->es_tupleTable, false);
    FreeExecutorState(w->estate);
}

// Whether the locked version of a candidate still qualifies, as EvalPlanQual would re-check the
// take statement's conditions on a row updated since the scan's snapshot.
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

// Plain C over PostgreSQL's API, run under pg_guard: no C++ object with a destructor lives here.
void take_rows(void* arg) {
    Request* r = static_cast<Request*>(arg);
    r->usable = false;
    r->taken = 0;
    MemoryContext caller = CurrentMemoryContext;
    Oid ns = get_namespace_oid("hopper", true);
    if (!OidIsValid(ns)) return;
    Oid jobs_id = get_relname_relid("jobs", ns);
    Oid queues_id = get_relname_relid("queues", ns);
    Oid history_id = get_relname_relid("job_history", ns);
    Oid pull_id = get_relname_relid("jobs_pull_idx", ns);
    if (!OidIsValid(jobs_id) || !OidIsValid(queues_id) || !OidIsValid(history_id) ||
        !OidIsValid(pull_id))
        return;
    // What the take statement needs: FOR UPDATE and DELETE on hopper.jobs, the history INSERT.
    if (!may(jobs_id, ACL_SELECT | ACL_UPDATE | ACL_DELETE) || !may(queues_id, ACL_SELECT) ||
        !may(history_id, ACL_INSERT))
        return;

    // As an SPI statement would: see what came before in this transaction, on a new snapshot.
    CommandCounterIncrement();
    PushActiveSnapshot(GetTransactionSnapshot());
    Snapshot snap = GetActiveSnapshot();
    Datum queue = PointerGetDatum(cstring_to_text_with_len(r->queue, r->queue_len));

    Relation queues = table_open(queues_id, AccessShareLock);
    QueueRow q{};
    bool ok = !queues->rd_rel->relrowsecurity && read_queue(queues, queue, snap, &q);
    table_close(queues, NoLock);
    if (!ok || (q.found && !q.paused && (q.limited || q.packed))) {
        PopActiveSnapshot();
        return;  // the statement's markers tell the caller what to do
    }
    if (!q.found || q.paused) {
        PopActiveSnapshot();
        r->usable = true;  // nothing to take, as the statement would find
        return;
    }

    Relation jobs = table_open(jobs_id, RowExclusiveLock);
    TupleDesc jd = RelationGetDescr(jobs);
    int col[kJobColumns];
    ok = jobs->rd_rel->relkind == RELKIND_RELATION && !jobs->rd_rel->relrowsecurity &&
         jobs->trigdesc == nullptr;
    for (int c = 0; c < kJobColumns && ok; ++c)
        ok = (col[c] = attnum_of(jd, kJobColumnNames[c])) != 0;
    Oid available = InvalidOid;
    if (ok) {
        available = enum_label(TupleDescAttr(jd, col[kState] - 1)->atttypid, "available");
        ok = OidIsValid(available);
    }
    Relation idx = index_open(pull_id, AccessShareLock);
    ok = ok && pull_index_as_expected(idx, jobs, col);

    Relation hist = nullptr;
    HistoryColumn map[kMaxHistoryColumns];
    Oid completed = InvalidOid;
    if (ok && q.keeps) {
        hist = table_open(history_id, RowExclusiveLock);
        TupleDesc hd = RelationGetDescr(hist);
        int state_col = attnum_of(hd, "state");
        ok = (hist->rd_rel->relkind == RELKIND_PARTITIONED_TABLE ||
              hist->rd_rel->relkind == RELKIND_RELATION) &&
             !hist->rd_rel->relrowsecurity && hist->trigdesc == nullptr && state_col != 0 &&
             map_history(hd, jd, col, map);
        if (ok) {
            completed = enum_label(TupleDescAttr(hd, state_col - 1)->atttypid, "completed");
            ok = OidIsValid(completed);
        }
    }
    if (!ok) {
        if (hist != nullptr) table_close(hist, NoLock);
        index_close(idx, NoLock);
        table_close(jobs, NoLock);
        PopActiveSnapshot();
        return;
    }

    // queue = $1, [(priority, run_at, id) >= start,] run_at <= at: the take statement's index
    // conditions, in index column order, each with the index column's collation.
    ScanKeyData keys[3];
    ScanKeyData row[3];
    int nkeys = 0;
    ScanKeyEntryInitialize(&keys[nkeys++], 0, 1, BTEqualStrategyNumber, InvalidOid,
                           idx->rd_indcollation[0], F_TEXTEQ, queue);
    if (r->start != nullptr) {
        const Datum values[3] = {Int16GetDatum(r->start->priority),
                                 TimestampTzGetDatum(r->start->run_at),
                                 Int64GetDatum(r->start->id)};
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
                           idx->rd_indcollation[2], F_TIMESTAMPTZ_LE, TimestampTzGetDatum(r->at));

    IndexScanDesc scan = index_beginscan(jobs, idx, snap, nkeys, 0);
    index_rescan(scan, keys, nkeys, nullptr, 0);
    TupleTableSlot* found = table_slot_create(jobs, nullptr);
    TupleTableSlot* locked = table_slot_create(jobs, nullptr);
    CommandId cid = GetCurrentCommandId(true);
    HistoryWriter writer{};
    bool writing = false;
    Datum worker = r->worker != nullptr
                       ? PointerGetDatum(cstring_to_text_with_len(r->worker, r->worker_len))
                       : (Datum)0;
    TimestampTz finished_at = GetCurrentTransactionStartTimestamp();

    while (r->taken < r->n && index_getnext_slot(scan, ForwardScanDirection, found)) {
        CHECK_FOR_INTERRUPTS();
        TM_FailureData tmfd;
        // FOR UPDATE SKIP LOCKED: a row locked by anyone else is passed over; one updated since
        // the snapshot is locked in its newest version and re-checked.
        TM_Result res =
            table_tuple_lock(jobs, &found->tts_tid, snap, locked, cid, LockTupleExclusive,
                             LockWaitSkip, TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &tmfd);
        if (res != TM_Ok) continue;
        if (!still_due(locked, col, available, queue, idx->rd_indcollation[0], r->at, r->start))
            continue;

        slot_getallattrs(locked);
        Datum* v = locked->tts_values;
        bool* isnull = locked->tts_isnull;
        Datum job[kJobColumns];
        bool job_null[kJobColumns];
        MemoryContext old = MemoryContextSwitchTo(caller);
        for (int c = 0; c < kJobColumns; ++c) {
            int i = col[c] - 1;
            job_null[c] = isnull[i];
            Form_pg_attribute att = TupleDescAttr(jd, i);
            job[c] = isnull[i] || att->attbyval ? v[i]
                     : att->attlen == -1        ? copy_varlena(v[i])
                                                : datumCopy(v[i], false, att->attlen);
        }
        if (r->taken == r->capacity) {
            r->capacity = r->capacity * 2;
            r->rows = static_cast<Row*>(repalloc(r->rows, sizeof(Row) * r->capacity));
        }
        MemoryContextSwitchTo(old);

        simple_table_tuple_delete(jobs, &locked->tts_tid, snap);

        int32 attempt = DatumGetInt32(job[kAttempt]) + 1;
        if (hist != nullptr) {
            if (!writing) {
                history_begin(hist, cid, &writer);
                writing = true;
            }
            TupleDesc hd = RelationGetDescr(hist);
            Datum* hv = writer.slot->tts_values;
            bool* hn = writer.slot->tts_isnull;
            for (int i = 0; i < hd->natts; ++i) {
                hn[i] = false;
                switch (map[i].source) {
                    case Source::kJob:
                        hv[i] = job[map[i].job_column];
                        hn[i] = job_null[map[i].job_column];
                        break;
                    case Source::kNextAttempt:
                        hv[i] = Int32GetDatum(attempt);
                        break;
                    case Source::kStartedAt:
                        hv[i] = TimestampTzGetDatum(r->at);
                        break;
                    case Source::kWorker:
                        hv[i] = worker;
                        hn[i] = r->worker == nullptr;
                        break;
                    case Source::kProgress:
                        hv[i] = Float4GetDatum(1.0f);
                        break;
                    case Source::kState:
                        hv[i] = ObjectIdGetDatum(completed);
                        break;
                    case Source::kFinishedAt:
                        hv[i] = TimestampTzGetDatum(finished_at);
                        break;
                    case Source::kNull:
                        hv[i] = (Datum)0;
                        hn[i] = true;
                        break;
                }
            }
            history_insert(&writer);
        }

        Row& out = r->rows[r->taken++];
        const int out_columns[7] = {kId, kQueue, kKind, kPayload, kAttempt, kRunAt, kCreatedAt};
        for (int i = 0; i < 7; ++i) {
            out.values[i] = job[out_columns[i]];
            out.nulls[i] = job_null[out_columns[i]];
        }
        out.values[4] = Int32GetDatum(attempt);
        out.key = {DatumGetInt16(job[kPriority]), DatumGetTimestampTz(job[kRunAt]),
                   DatumGetInt64(job[kId])};
    }

    if (writing) history_end(&writer);
    ExecDropSingleTupleTableSlot(locked);
    ExecDropSingleTupleTableSlot(found);
    index_endscan(scan);
    index_close(idx, NoLock);
    if (hist != nullptr) table_close(hist, NoLock);
    table_close(jobs, NoLock);
    PopActiveSnapshot();
    // What follows in this transaction sees the take, as after an SPI statement.
    if (r->taken > 0) CommandCounterIncrement();
    r->usable = true;
    r->notify_done = q.notify_done;
}

}  // namespace

std::optional<Taken> take(const std::string& queue, int64_t n, TimestampTz at,
                          const claim_hint::Key* start, const std::optional<std::string>& worker) {
    Request r{};
    r.queue = queue.data();
    r.queue_len = static_cast<int>(queue.size());
    r.n = n;
    r.at = at;
    r.start = start;
    r.worker = worker ? worker->data() : nullptr;
    r.worker_len = worker ? static_cast<int>(worker->size()) : 0;
    r.capacity = static_cast<int>(n < 16 ? n : 16);
    r.rows = pg_guard([&] { return static_cast<Row*>(palloc(sizeof(Row) * r.capacity)); });
    detail::guarded_call(take_rows, &r);
    if (!r.usable) return std::nullopt;
    Taken t;
    t.notify_done = r.notify_done;
    t.rows.assign(r.rows, r.rows + r.taken);
    return t;
}

}  // namespace hopper::take_direct
