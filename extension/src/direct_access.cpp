// See include/hopper/direct_access.hpp.
#include <algorithm>
#include <cstring>

#include "hopper/direct_access.hpp"
#include "hopper/direct_insert.hpp"
#include "hopper/table_layout.hpp"

extern "C" {
#include "access/detoast.h"
#include "access/genam.h"
#include "access/nbtree.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_enum.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "partitioning/partbounds.h"
#include "partitioning/partdesc.h"
#include "storage/lmgr.h"
#include "storage/sinval.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/partcache.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
}

namespace hopper::direct_access {

namespace {
// The key of the tables' OIDs in table_layout's memory, remembered under no relation of their own.
const int kTablesKey = 0;
// SharedInvalidMessageCounter as it was before tables() last found the OIDs it handed out (in its
// memory or by name): they named hopper's tables as far as the invalidations taken by then tell.
uint64 tables_checked_at = 0;
}  // namespace

bool tables(Tables* t) {
    constexpr int kCount = 8;
    int found[kCount];
    tables_checked_at = SharedInvalidMessageCounter;
    if (table_layout::recall(&kTablesKey, InvalidOid, found, kCount)) {
        t->jobs = found[0], t->queues = found[1], t->history = found[2];
        t->pull_index = found[3], t->lease_token = found[4], t->job_id = found[5];
        t->batches = found[6], t->batches_pull_index = found[7];
        return true;
    }
    uint64 since = table_layout::generation();
    Oid ns = get_namespace_oid("hopper", true);
    if (!OidIsValid(ns)) return false;
    t->jobs = get_relname_relid("jobs", ns);
    t->queues = get_relname_relid("queues", ns);
    t->history = get_relname_relid("job_history", ns);
    t->pull_index = get_relname_relid("jobs_pull_idx", ns);
    t->lease_token = get_relname_relid("lease_token_seq", ns);
    t->job_id = get_relname_relid("job_id_seq", ns);
    t->batches = get_relname_relid("job_batches", ns);
    t->batches_pull_index = get_relname_relid("job_batches_pull_idx", ns);
    const Oid rels[] = {t->jobs,        t->queues, t->history, t->pull_index,
                        t->lease_token, t->job_id, t->batches, t->batches_pull_index};
    for (Oid rel : rels)
        if (!OidIsValid(rel)) return false;
    const Oid watched[] = {InvalidOid, t->jobs,       t->queues,
                           t->history, t->pull_index, t->lease_token,
                           t->job_id,  t->batches,    t->batches_pull_index};
    int values[kCount];
    for (int i = 0; i < kCount; ++i) values[i] = static_cast<int>(rels[i]);
    table_layout::remember(&kTablesKey, watched, kCount + 1, values, kCount, since);
    return true;
}

bool find_tables(Tables* t) {
    if (XactReadOnly || IsolationUsesXactSnapshot()) return false;
    return tables(t);
}

Relation open_table(Oid relid, LOCKMODE mode) {
    LockRelationOid(relid, mode);
    // A drop committed before the lock was granted sent an invalidation, which the lock took (or
    // an earlier one did, after tables() answered). None came in: the OID still names the table.
    if (SharedInvalidMessageCounter != tables_checked_at &&
        !SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid))) {
        UnlockRelationOid(relid, mode);
        table_layout::forget();
        return nullptr;
    }
    return table_open(relid, NoLock);
}

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

bool lists_index(Relation table, Oid index) {
    // The relcache keeps the list once built (RelationGetIndexList hands out a copy each time).
    if (!table->rd_indexvalid) list_free(RelationGetIndexList(table));
    return list_member_oid(table->rd_indexlist, index);
}

bool may(Oid relid, AclMode mode) {
    return pg_class_aclmask(relid, GetUserId(), mode, ACLMASK_ALL) == mode;
}

Datum copy_value(Form_pg_attribute att, Datum value) {
    if (att->attbyval) return value;
    if (att->attlen == -1) {
        auto* v = reinterpret_cast<struct varlena*>(DatumGetPointer(value));
        if (VARATT_IS_EXTENDED(v)) return PointerGetDatum(detoast_attr(v));
    }
    return datumCopy(value, false, att->attlen);
}

bool open_queues(Oid relid, QueueTable* t) {
    t->pkey = nullptr;
    t->rel = open_table(relid, AccessShareLock);
    if (t->rel == nullptr) return false;
    static const char* const kNames[] = {
        "name",      "paused", "limited",     "packed",          "notify_done",
        "retention", "lease",  "max_running", "key_max_running", "rated"};
    static const Oid kTypes[] = {TEXTOID,     BOOLOID,     BOOLOID, BOOLOID, BOOLOID,
                                 INTERVALOID, INTERVALOID, INT4OID, INT4OID, BOOLOID};
    int col[10];
    bool ok = table_layout::attnums(t->rel, kNames, kTypes, 10, col);
    t->name = col[0], t->paused = col[1], t->limited = col[2], t->packed = col[3];
    t->notify_done = col[4], t->retention = col[5], t->lease = col[6];
    t->max_running = col[7], t->key_max_running = col[8], t->rated = col[9];
    Oid pkey = RelationGetPrimaryKeyIndex(t->rel);
    ok = ok && !t->rel->rd_rel->relrowsecurity && OidIsValid(pkey);
    if (ok) {
        t->pkey = index_open(pkey, AccessShareLock);
        ok = t->pkey->rd_index->indnkeyatts == 1 && t->pkey->rd_index->indkey.values[0] == t->name;
    }
    if (!ok) close_queues(t);
    return ok;
}

void read_queue(const QueueTable& t, Datum name, Snapshot snap, QueueRow* q) {
    // The index's own collation: the scan's descent compares with it.
    ScanKeyData key;
    ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid,
                           t.pkey->rd_indcollation[0], F_TEXTEQ, name);
    IndexScanDesc scan = index_beginscan(t.rel, t.pkey, snap, 1, 0);
    index_rescan(scan, &key, 1, nullptr, 0);
    TupleTableSlot* slot = table_slot_create(t.rel, nullptr);
    q->found = index_getnext_slot(scan, ForwardScanDirection, slot);
    if (q->found) {
        bool isnull;
        auto flag = [&](int col) {
            Datum d = slot_getattr(slot, col, &isnull);
            return !isnull && DatumGetBool(d);
        };
        q->paused = flag(t.paused);
        q->limited = flag(t.limited);
        q->packed = flag(t.packed);
        q->rated = flag(t.rated);
        q->notify_done = flag(t.notify_done);
        Interval zero{0, 0, 0};
        Datum r = slot_getattr(slot, t.retention, &isnull);
        q->keeps =
            !isnull && DatumGetBool(DirectFunctionCall2(interval_gt, r, IntervalPGetDatum(&zero)));
        // Stored as a time-only interval (the table's check): its microseconds are the lease.
        Datum l = slot_getattr(slot, t.lease, &isnull);
        q->lease_us = isnull ? 0 : DatumGetIntervalP(l)->time;
        auto limit = [&](int col) {
            Datum d = slot_getattr(slot, col, &isnull);
            return isnull ? -1 : DatumGetInt32(d);
        };
        q->max_running = limit(t.max_running);
        q->key_max_running = limit(t.key_max_running);
    }
    ExecDropSingleTupleTableSlot(slot);
    index_endscan(scan);
}

void close_queues(QueueTable* t) {
    if (t->pkey != nullptr) index_close(t->pkey, NoLock);
    if (t->rel != nullptr) table_close(t->rel, NoLock);
    t->pkey = nullptr;
    t->rel = nullptr;
}

namespace {

constexpr int kNullColumn = -1 - kHistoryExtras;  // a dropped column

constexpr const char* kExtraNames[kHistoryExtras] = {"attempt", "started_at",  "worker", "progress",
                                                     "state",   "finished_at", "result"};
// The types the extras are written as; state's is hopper.jobs' state type.
constexpr Oid kExtraTypes[kHistoryExtras] = {INT4OID,    TIMESTAMPTZOID, TEXTOID, FLOAT4OID,
                                             InvalidOid, TIMESTAMPTZOID, JSONBOID};

constexpr const char* kCopiedNames[] = {
    "id",        "queue",           "priority",   "run_at", "max_attempts",    "created_at", "kind",
    "dedup_key", "concurrency_key", "last_error", "errors", "progress_detail", "payload"};

bool map_history(TupleDesc hist, TupleDesc jobs, int* source) {
    if (hist->natts > kMaxHistoryColumns) return false;
    for (int i = 0; i < hist->natts; ++i) {
        Form_pg_attribute att = TupleDescAttr(hist, i);
        source[i] = kNullColumn;
        if (att->attisdropped) continue;
        const char* name = NameStr(att->attname);
        int extra = 0;
        while (extra < kHistoryExtras && std::strcmp(name, kExtraNames[extra]) != 0) ++extra;
        if (extra < kHistoryExtras) {
            Oid type = kExtraTypes[extra];
            if (extra == kExtraState) {
                int state = attnum_of(jobs, "state");
                if (state == 0) return false;
                type = TupleDescAttr(jobs, state - 1)->atttypid;
            }
            if (!table_layout::typed(att, type)) return false;
            source[i] = -1 - extra;
            continue;
        }
        // Only the columns the statements copy (HOPPER_HISTORY_INSERT): a column of the
        // operator's own, even one hopper.jobs has too, is left to the statements, which give it
        // its default, so that both ways write the same row.
        bool copied = false;
        for (const char* c : kCopiedNames) copied = copied || std::strcmp(name, c) == 0;
        if (!copied) return false;
        // The same type and typmod: the job's value is copied as it is, with no cast or check.
        int job = attnum_of(jobs, name);
        if (job == 0 || TupleDescAttr(jobs, job - 1)->atttypid != att->atttypid ||
            TupleDescAttr(jobs, job - 1)->atttypmod != att->atttypmod)
            return false;
        source[i] = job - 1;
    }
    return true;
}

// map_history, remembered for the two tables.
const int kHistoryMapKey = 0;
bool mapped_history(Relation hist, Relation jobs, int* source) {
    int natts = RelationGetDescr(hist)->natts;
    if (table_layout::recall(&kHistoryMapKey, RelationGetRelid(hist), source, natts)) return true;
    uint64 since = table_layout::generation();
    if (!map_history(RelationGetDescr(hist), RelationGetDescr(jobs), source)) return false;
    const Oid rels[] = {RelationGetRelid(hist), RelationGetRelid(jobs)};
    table_layout::remember(&kHistoryMapKey, rels, 2, source, natts, since);
    return true;
}

void history_begin(HistoryWriter* w, CommandId cid) {
    Relation hist = w->rel;
    w->estate = CreateExecutorState();
    MemoryContext old = MemoryContextSwitchTo(w->estate->es_query_cxt);
    w->root = direct_insert::result_relation(w->estate, hist);
    w->estate->es_output_cid = cid;
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
    w->started = true;
}

// What ExecSimpleRelationInsert does, less the partition constraint check: the row was routed to
// this partition by its bounds, as the SQL INSERT's rows are (and the INSERT skips the check for
// them too).
void insert_routed(ResultRelInfo* partition, TupleTableSlot* slot, EState* estate) {
    Relation rel = partition->ri_RelationDesc;
    CheckCmdReplicaIdentity(rel, CMD_INSERT);
    if (rel->rd_att->constr) ExecConstraints(partition, slot, estate);
    simple_table_tuple_insert(rel, slot);
    if (partition->ri_NumIndices > 0)
        ExecInsertIndexTuples(partition, slot, estate, false, false, nullptr, NIL);
}

// The partition key's column if `hist` is partitioned by range on one plain column, else 0.
int range_key_of(Relation hist) {
    if (hist->rd_rel->relkind != RELKIND_PARTITIONED_TABLE) return 0;
    PartitionKey key = RelationGetPartitionKey(hist);
    return key->strategy == PARTITION_STRATEGY_RANGE && key->partnatts == 1 ? key->partattrs[0] : 0;
}

// The leaf partition of `hist` whose range holds `value`, as get_partition_for_tuple finds it
// (partitions being detached left out, as they are for an INSERT outside REPEATABLE READ, the
// only isolation the direct paths run in). InvalidOid if no range holds it or its partition is
// partitioned in turn: the executor's routing deals with those, and with the default partition,
// whose constraint it checks against a range attached meanwhile.
Oid range_partition(Relation hist, Datum value, bool isnull) {
    if (isnull) return InvalidOid;
    PartitionKey key = RelationGetPartitionKey(hist);
    PartitionDesc desc = RelationGetPartitionDesc(hist, true);
    PartitionBoundInfo bounds = desc->boundinfo;
    if (bounds == nullptr) return InvalidOid;
    bool equal;
    int offset = partition_range_datum_bsearch(key->partsupfunc, key->partcollation, bounds, 1,
                                               &value, &equal);
    int index = bounds->indexes[offset + 1];
    if (index < 0 || !desc->is_leaf[index]) return InvalidOid;
    return desc->oids[index];
}

// Whether `part` has the columns of `hist` in the same places, so that a row of one is a row of
// the other (no attribute map, as the executor's routing would find).
bool same_columns(TupleDesc hist, TupleDesc part) {
    if (hist->natts != part->natts) return false;
    for (int i = 0; i < hist->natts; ++i) {
        Form_pg_attribute a = TupleDescAttr(hist, i);
        Form_pg_attribute b = TupleDescAttr(part, i);
        if (a->attisdropped != b->attisdropped) return false;
        if (!a->attisdropped && (a->atttypid != b->atttypid || a->atttypmod != b->atttypmod ||
                                 std::strcmp(NameStr(a->attname), NameStr(b->attname)) != 0))
            return false;
    }
    return true;
}

// Writes the rows held back for the straight partition.
void flush_direct(HistoryWriter* w) {
    if (w->n_pending == 0) return;
    CheckCmdReplicaIdentity(w->direct_rel, CMD_INSERT);
    direct_insert::write_held(&w->direct, w->pending, w->n_pending);
    w->n_pending = 0;
}

void close_direct(HistoryWriter* w) {
    if (!OidIsValid(w->direct_oid)) return;
    flush_direct(w);
    direct_insert::end(w->direct_rel, &w->direct, false);
    w->direct_oid = InvalidOid;
    w->direct_rel = nullptr;
}

// Writes the row straight into its partition if that one is fit for it; false otherwise.
bool insert_direct(HistoryWriter* w, CommandId cid, const Datum* values, const bool* nulls) {
    Oid part = range_partition(w->rel, values[w->range_key - 1], nulls[w->range_key - 1]);
    if (!OidIsValid(part) || part == w->unfit_oid) return false;
    if (part != w->direct_oid) {
        close_direct(w);
        // Locked as the executor's routing locks the partitions it opens.
        Relation rel = table_open(part, RowExclusiveLock);
        if (rel->rd_rel->relkind != RELKIND_RELATION || direct_insert::defers_to_sql(rel) ||
            !same_columns(RelationGetDescr(w->rel), RelationGetDescr(rel))) {
            table_close(rel, NoLock);
            w->unfit_oid = part;
            return false;
        }
        direct_insert::begin_apart(rel, &w->direct);
        w->direct.estate->es_output_cid = cid;
        w->direct_rel = rel;
        w->direct_oid = part;
        w->n_made = 0;
    }
    direct_insert::Inserter* in = &w->direct;
    TupleTableSlot* slot = in->slot;
    int natts = RelationGetDescr(w->direct_rel)->natts;
    std::memcpy(slot->tts_values, values, sizeof(Datum) * natts);
    std::memcpy(slot->tts_isnull, nulls, sizeof(bool) * natts);
    ExecStoreVirtualTuple(slot);
    MemoryContext old = MemoryContextSwitchTo(GetPerTupleMemoryContext(in->estate));
    direct_insert::open_indexes_for(in, slot);
    if (w->direct_rel->rd_att->constr) ExecConstraints(in->rri, slot, in->estate);
    MemoryContextSwitchTo(in->estate->es_query_cxt);
    if (w->n_pending == w->n_made)
        w->pending[w->n_made++] = table_slot_create(w->direct_rel, &in->estate->es_tupleTable);
    // The copy owns its values: the caller's point into the job's row, which moves on.
    ExecCopySlot(w->pending[w->n_pending++], slot);
    MemoryContextSwitchTo(old);
    ExecClearTuple(slot);
    ResetPerTupleExprContext(in->estate);
    if (w->n_pending == kHistoryBatch) flush_direct(w);
    return true;
}

}  // namespace

bool history_open(Oid relid, Relation jobs, HistoryWriter* w) {
    w->started = false;
    w->n_pending = 0;
    w->n_made = 0;
    w->direct_oid = InvalidOid;
    w->unfit_oid = InvalidOid;
    w->direct_rel = nullptr;
    w->rel = open_table(relid, RowExclusiveLock);
    if (w->rel == nullptr) return false;
    Relation hist = w->rel;
    bool ok = (hist->rd_rel->relkind == RELKIND_PARTITIONED_TABLE ||
               hist->rd_rel->relkind == RELKIND_RELATION) &&
              !direct_insert::defers_to_sql(hist) && mapped_history(hist, jobs, w->source);
    if (!ok) {
        table_close(hist, NoLock);
        w->rel = nullptr;
        return false;
    }
    w->range_key = range_key_of(hist);
    w->finished_col = w->created_col = w->started_col = -1;
    w->clock = 0;
    TupleDesc desc = RelationGetDescr(hist);
    for (int i = 0; i < desc->natts; ++i) {
        int s = w->source[i];
        if (s == -1 - kExtraFinishedAt) w->finished_col = i;
        if (s == -1 - kExtraStartedAt) w->started_col = i;
        if (s >= 0 && std::strcmp(NameStr(TupleDescAttr(desc, i)->attname), "created_at") == 0)
            w->created_col = i;
    }
    return true;
}

namespace {

// The row's finished_at as HOPPER_FINISHED_AT makes it (see include/hopper/sql.hpp): never before
// the job was created, nor before it started unless that start is still ahead of the clock.
void finish_after_start(HistoryWriter* w, Datum* values, const bool* nulls) {
    if (w->finished_col < 0 || nulls[w->finished_col]) return;
    TimestampTz finished = DatumGetTimestampTz(values[w->finished_col]);
    TimestampTz at = finished;
    if (w->created_col >= 0 && !nulls[w->created_col])
        at = std::max(at, DatumGetTimestampTz(values[w->created_col]));
    if (w->started_col >= 0 && !nulls[w->started_col]) {
        TimestampTz started = DatumGetTimestampTz(values[w->started_col]);
        if (started > finished) {
            if (w->clock == 0) w->clock = GetCurrentTimestamp();
            if (started <= w->clock) at = std::max(at, started);
        }
    }
    values[w->finished_col] = TimestampTzGetDatum(at);
}

}  // namespace

void history_insert(HistoryWriter* w, CommandId cid, const Datum* job_values, const bool* job_nulls,
                    const Datum* extras, const bool* extra_nulls) {
    int natts = RelationGetDescr(w->rel)->natts;
    Datum values[kMaxHistoryColumns];
    bool nulls[kMaxHistoryColumns];
    for (int i = 0; i < natts; ++i) {
        int s = w->source[i];
        values[i] = s >= 0 ? job_values[s] : s == kNullColumn ? (Datum)0 : extras[-1 - s];
        nulls[i] = s >= 0 ? job_nulls[s] : s == kNullColumn || extra_nulls[-1 - s];
    }
    finish_after_start(w, values, nulls);
    if (w->range_key != 0 && insert_direct(w, cid, values, nulls)) return;

    if (!w->started) history_begin(w, cid);
    std::memcpy(w->slot->tts_values, values, sizeof(Datum) * natts);
    std::memcpy(w->slot->tts_isnull, nulls, sizeof(bool) * natts);
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
    Relation rel = target->ri_RelationDesc;
    if (w->proute != nullptr && target->ri_TrigDesc == nullptr &&
        !(rel->rd_att->constr && rel->rd_att->constr->has_generated_stored)) {
        insert_routed(target, slot, w->estate);
    } else {
        ExecSimpleRelationInsert(target, w->estate, slot);
    }
    MemoryContextSwitchTo(old);
    ExecClearTuple(w->slot);
    ResetPerTupleExprContext(w->estate);
}

void history_close(HistoryWriter* w) {
    close_direct(w);
    if (w->started) {
        AfterTriggerEndQuery(w->estate);
        if (w->proute != nullptr)
            ExecCleanupTupleRouting(w->mtstate, w->proute);
        else
            ExecCloseIndices(w->root);
        // The partitions that firing AFTER triggers opened for themselves.
        ExecCloseResultRelations(w->estate);
        ExecResetTupleTable(w->estate->es_tupleTable, false);
        FreeExecutorState(w->estate);
        w->started = false;
    }
    if (w->rel != nullptr) table_close(w->rel, NoLock);
    w->rel = nullptr;
}

}  // namespace hopper::direct_access
