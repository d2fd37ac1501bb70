// See include/hopper/packed_claim.hpp.
#include <algorithm>
#include <cstring>

#include "hopper/batches.hpp"
#include "hopper/direct_access.hpp"
#include "hopper/leaf_walk.hpp"
#include "hopper/packed_claim.hpp"
#include "hopper/table_columns.hpp"
#include "hopper/table_layout.hpp"

extern "C" {
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_am.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
}

namespace hopper::packed_claim {
namespace {

using namespace batches_table;

// Whether the pull index is the one the scan keys are built for: btree, valid, on (queue text,
// priority, run_at, first_id), ascending, under a deterministic collation.
bool index_as_expected(Relation idx, Relation rel, const int* col) {
    Form_pg_index ix = idx->rd_index;
    if (idx->rd_rel->relam != BTREE_AM_OID || ix->indrelid != RelationGetRelid(rel) ||
        !ix->indisvalid || !ix->indisready || ix->indnkeyatts != 4 || !leaf_walk::usable(idx) ||
        !heap_attisnull(idx->rd_indextuple, Anum_pg_index_indpred, nullptr))
        return false;
    const int keys[4] = {col[kQueue], col[kPriority], col[kRunAt], col[kFirstId]};
    for (int i = 0; i < 4; ++i)
        if (ix->indkey.values[i] != keys[i]) return false;
    return true;
}

// Reads a locked row and lists up to n of its waiting jobs.
void add_row(Source* s, TupleTableSlot* locked, int64_t n) {
    slot_getallattrs(locked);
    const Datum* v = locked->tts_values;
    const bool* isnull = locked->tts_isnull;
    for (int c : {kPriority, kRunAt, kCreatedAt, kMaxAttempts, kTaken, kIds, kPayloads})
        if (isnull[s->col[c] - 1]) return;  // NOT NULL columns; as the statement, take nothing
    ArrayType* ids = DatumGetArrayTypeP(v[s->col[kIds] - 1]);
    ArrayType* payloads = DatumGetArrayTypeP(v[s->col[kPayloads] - 1]);
    Datum* id_values;
    bool* id_nulls;
    int n_ids;
    deconstruct_array(ids, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &id_values, &id_nulls,
                      &n_ids);
    Datum* payload_values;
    bool* payload_nulls;
    int n_payloads;
    deconstruct_array(payloads, JSONBOID, -1, false, TYPALIGN_INT, &payload_values, &payload_nulls,
                      &n_payloads);
    int32 taken = DatumGetInt32(v[s->col[kTaken] - 1]);
    if (n_ids != n_payloads || taken < 0 || taken >= n_ids) return;

    Row& row = s->rows[s->n_rows];
    row.locked = locked;
    row.priority = DatumGetInt16(v[s->col[kPriority] - 1]);
    row.run_at = DatumGetTimestampTz(v[s->col[kRunAt] - 1]);
    row.created_at = DatumGetTimestampTz(v[s->col[kCreatedAt] - 1]);
    row.max_attempts = DatumGetInt32(v[s->col[kMaxAttempts] - 1]);
    row.kind_null = isnull[s->col[kKind] - 1];
    row.kind = row.kind_null ? (Datum)0 : v[s->col[kKind] - 1];
    row.taken = taken;
    row.count = n_ids;
    row.used = 0;
    int last = static_cast<int>(
        std::min<int64_t>(n_ids, taken + std::min<int64_t>(n, batches::kJobsPerRow)));
    for (int i = taken; i < last; ++i) {
        if (id_nulls[i] || payload_nulls[i]) break;
        Job& job = s->jobs[s->n_jobs++];
        job.key = {row.priority, row.run_at, DatumGetInt64(id_values[i])};
        job.payload = payload_values[i];
        job.row = s->n_rows;
    }
    s->n_rows++;
}

}  // namespace

bool open(Oid relid, Oid index, Source* s) {
    if (!OidIsValid(relid) || !OidIsValid(index) ||
        !direct_access::may(relid, ACL_SELECT | ACL_UPDATE | ACL_DELETE))
        return false;
    Relation rel = direct_access::open_table(relid, RowExclusiveLock);
    if (rel == nullptr) return false;
    bool ok = rel->rd_rel->relkind == RELKIND_RELATION && !direct_insert::defers_to_sql(rel);
    ok = ok && table_layout::attnums(rel, kNames, kTypes, kColumns, s->col);
    if (!ok || !direct_access::lists_index(rel, index)) {
        table_close(rel, NoLock);
        return false;
    }
    Relation idx = index_open(index, AccessShareLock);
    if (!index_as_expected(idx, rel, s->col)) {
        index_close(idx, NoLock);
        table_close(rel, NoLock);
        return false;
    }
    s->rel = rel;
    s->index = idx;
    s->rows = nullptr;
    s->n_rows = 0;
    s->jobs = nullptr;
    s->n_jobs = 0;
    s->next = 0;
    direct_insert::begin_apart(rel, &s->writer);
    return true;
}

void lock_rows(Source* s, Datum queue, TimestampTz at, Snapshot snap, CommandId cid, int64_t n) {
    // Rows are locked until their waiting jobs number n: the claim merges them with the ordinary
    // jobs in pull order, and a packed job left in a row it did not lock would be passed over by
    // a later job of the queue (rows partly taken, or small batches, hold fewer than they could).
    // A row lists at most min(n, kJobsPerRow) jobs, and the loop ends once n are listed.
    int64_t per_row = std::min<int64_t>(n, batches::kJobsPerRow);
    int64_t rows_room = std::min<int64_t>(n, n / batches::kJobsPerRow + 1);
    s->rows = static_cast<Row*>(palloc(sizeof(Row) * rows_room));
    s->jobs = static_cast<Job*>(palloc(sizeof(Job) * (n - 1 + per_row)));
    s->writer.estate->es_snapshot = snap;

    ScanKeyData keys[2];
    ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
                           s->index->rd_indcollation[0], F_TEXTEQ, queue);
    ScanKeyEntryInitialize(&keys[1], 0, 3, BTLessEqualStrategyNumber, InvalidOid,
                           s->index->rd_indcollation[2], F_TIMESTAMPTZ_LE, TimestampTzGetDatum(at));
    IndexScanDesc scan = index_beginscan(s->rel, s->index, snap, 2, 0);
    index_rescan(scan, keys, 2, nullptr, 0);
    TupleTableSlot* found = table_slot_create(s->rel, nullptr);
    TupleTableSlot* locked = nullptr;
    while (s->n_jobs < n && index_getnext_slot(scan, ForwardScanDirection, found)) {
        CHECK_FOR_INTERRUPTS();
        if (s->n_rows == rows_room) {
            rows_room *= 2;
            s->rows = static_cast<Row*>(repalloc(s->rows, sizeof(Row) * rows_room));
        }
        if (locked == nullptr) locked = table_slot_create(s->rel, nullptr);
        TM_FailureData tmfd;
        TM_Result res =
            table_tuple_lock(s->rel, &found->tts_tid, snap, locked, cid, LockTupleExclusive,
                             LockWaitSkip, TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &tmfd);
        if (res != TM_Ok) continue;
        // The newest version's queue and run_at are the ones the scan found: a claim changes
        // only the front of a row.
        int before_rows = s->n_rows;
        add_row(s, locked, n);
        if (s->n_rows > before_rows) locked = nullptr;  // kept by the row
    }
    index_endscan(scan);
    ExecDropSingleTupleTableSlot(found);
    if (locked != nullptr) ExecDropSingleTupleTableSlot(locked);
    std::sort(s->jobs, s->jobs + s->n_jobs,
              [](const Job& a, const Job& b) { return claim_hint::before(a.key, b.key); });
}

const Job* peek(const Source* s) {
    return s->next < s->n_jobs ? &s->jobs[s->next] : nullptr;
}

void take(Source* s) {
    s->rows[s->jobs[s->next].row].used++;
    s->next++;
}

void finish(Source* s, Snapshot snap) {
    for (int i = 0; i < s->n_rows; ++i) {
        Row& row = s->rows[i];
        if (row.used > 0) {
            if (row.taken + row.used >= row.count) {
                CheckCmdReplicaIdentity(s->rel, CMD_DELETE);
                simple_table_tuple_delete(s->rel, &row.locked->tts_tid, snap);
            } else {
                CheckCmdReplicaIdentity(s->rel, CMD_UPDATE);
                TupleTableSlot* next = s->writer.slot;
                ExecClearTuple(next);
                int natts = RelationGetDescr(s->rel)->natts;
                std::memcpy(next->tts_values, row.locked->tts_values, sizeof(Datum) * natts);
                std::memcpy(next->tts_isnull, row.locked->tts_isnull, sizeof(bool) * natts);
                next->tts_values[s->col[kTaken] - 1] = Int32GetDatum(row.taken + row.used);
                ExecStoreVirtualTuple(next);
                direct_insert::open_indexes_for(&s->writer, next);
                MemoryContext old =
                    MemoryContextSwitchTo(GetPerTupleMemoryContext(s->writer.estate));
                ExecSimpleRelationUpdate(s->writer.rri, s->writer.estate, nullptr, row.locked,
                                         next);
                MemoryContextSwitchTo(old);
                ResetPerTupleExprContext(s->writer.estate);
                ExecClearTuple(next);
            }
        }
        ExecDropSingleTupleTableSlot(row.locked);
    }
    index_close(s->index, NoLock);
    direct_insert::end(s->rel, &s->writer, false);
}

}  // namespace hopper::packed_claim
