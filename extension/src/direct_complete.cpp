// See include/hopper/direct_complete.hpp.
#include <cstring>

#include "hopper/boundary.hpp"
#include "hopper/direct_access.hpp"
#include "hopper/direct_complete.hpp"
#include "hopper/direct_insert.hpp"
#include "hopper/lease_rows.hpp"
#include "hopper/queue_rows.hpp"
#include "hopper/table_layout.hpp"

extern "C" {
#include "access/genam.h"
#include "access/nbtree.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

namespace hopper::direct_complete {
namespace {

using namespace direct_access;

enum JobColumn { kId, kQueue, kState, kLeaseToken, kAttempt, kStartedAt, kWorker, kJobColumns };
constexpr const char* kJobColumnNames[kJobColumns] = {
    "id", "queue", "state", "lease_token", "attempt", "started_at", "worker"};
constexpr Oid kJobColumnTypes[kJobColumns] = {INT8OID, TEXTOID,        InvalidOid, INT8OID,
                                              INT4OID, TIMESTAMPTZOID, TEXTOID};

// One item's outcome, in plain C.
struct Outcome {
    bool done;
    bool notify_done;
    bool limited;
    char* queue;  // palloc'd
};

struct Request {
    const Item* items;
    int count;
    bool usable;
    Outcome* out;  // count of them, palloc'd by the caller
};

// Whether the row in slot is the running job `id` holding `token`: the DELETE's conditions.
bool holds(TupleTableSlot* slot, const int* col, Oid running, int64 id, int64 token) {
    bool isnull;
    Datum v = slot_getattr(slot, col[kId], &isnull);
    if (isnull || DatumGetInt64(v) != id) return false;
    v = slot_getattr(slot, col[kLeaseToken], &isnull);
    if (isnull || DatumGetInt64(v) != token) return false;
    v = slot_getattr(slot, col[kState], &isnull);
    return !isnull && DatumGetObjectId(v) == running;
}

// Plain C over PostgreSQL's API, run under pg_guard: no C++ object with a destructor lives here.
void complete_rows(void* arg) {
    Request* r = static_cast<Request*>(arg);
    r->usable = false;
    MemoryContext caller = CurrentMemoryContext;
    Tables t;
    if (!find_tables(&t)) return;
    // What the statement needs: the DELETE with its conditions, the queue lookups, the INSERT.
    if (!may(t.jobs, ACL_SELECT | ACL_DELETE) || !may(t.queues, ACL_SELECT) ||
        !may(t.history, ACL_INSERT))
        return;

    Relation jobs = open_table(t.jobs, RowExclusiveLock);
    if (jobs == nullptr) return;
    TupleDesc jd = RelationGetDescr(jobs);
    int col[kJobColumns];
    bool ok = jobs->rd_rel->relkind == RELKIND_RELATION && !direct_insert::defers_to_sql(jobs);
    ok = ok && table_layout::attnums(jobs, kJobColumnNames, kJobColumnTypes, kJobColumns, col);
    Oid running = InvalidOid;
    Oid completed = InvalidOid;
    if (ok) {
        Oid state_type = TupleDescAttr(jd, col[kState] - 1)->atttypid;
        running = enum_label(state_type, "running");
        completed = enum_label(state_type, "completed");
        ok = OidIsValid(running) && OidIsValid(completed);
    }
    Oid pkey = ok ? RelationGetPrimaryKeyIndex(jobs) : InvalidOid;
    Relation idx = nullptr;
    if (OidIsValid(pkey)) {
        idx = index_open(pkey, RowExclusiveLock);
        ok = idx->rd_index->indnkeyatts == 1 && idx->rd_index->indkey.values[0] == col[kId];
    } else {
        ok = false;
    }
    QueueTable queues{};
    if (ok) ok = open_queues(t.queues, &queues);
    HistoryWriter history{};
    if (ok) ok = history_open(t.history, jobs, &history);
    if (!ok) {
        close_queues(&queues);
        if (idx != nullptr) index_close(idx, NoLock);
        table_close(jobs, NoLock);
        return;
    }

    // As an SPI statement would: see what came before in this transaction, on a new snapshot.
    CommandCounterIncrement();
    uint64_t generation = queue_rows::accept();
    PushActiveSnapshot(GetTransactionSnapshot());
    Snapshot snap = GetActiveSnapshot();
    CommandId cid = GetCurrentCommandId(true);
    TupleTableSlot* found = table_slot_create(jobs, nullptr);
    TupleTableSlot* newest = table_slot_create(jobs, nullptr);
    IndexScanDesc scan = index_beginscan(jobs, idx, snap, 1, 0);
    Datum extras[kHistoryExtras];
    bool extra_nulls[kHistoryExtras] = {};
    extras[kExtraProgress] = Float4GetDatum(1.0f);
    extras[kExtraState] = ObjectIdGetDatum(completed);
    extras[kExtraFinishedAt] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
    // The queue last looked up: a batch's jobs are mostly of one queue.
    Datum queue_name = (Datum)0;
    QueueRow q{};
    // The table's length, read once if an address is recalled: one beyond it (VACUUM truncated
    // the table since) must not be read.
    BlockNumber blocks = InvalidBlockNumber;

    for (int i = 0; i < r->count; ++i) {
        CHECK_FOR_INTERRUPTS();
        const Item& item = r->items[i];
        Outcome& out = r->out[i];
        out.done = false;
        out.notify_done = false;
        out.limited = false;
        out.queue = nullptr;
        // The row where this backend's lease left it, if it is still the one the snapshot sees;
        // else the primary key's.
        ItemPointerData tid;
        bool at_hint = false;
        if (lease_rows::recall(RelationGetRelid(jobs), item.id, item.token, &tid)) {
            if (blocks == InvalidBlockNumber) blocks = RelationGetNumberOfBlocks(jobs);
            at_hint = ItemPointerGetBlockNumber(&tid) < blocks &&
                      table_tuple_fetch_row_version(jobs, &tid, snap, found) &&
                      holds(found, col, running, item.id, item.token);
        }
        if (!at_hint) {
            ScanKeyData key;
            ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid, InvalidOid,
                                   F_INT8EQ, Int64GetDatum(item.id));
            index_rescan(scan, &key, 1, nullptr, 0);
            if (!index_getnext_slot(scan, ForwardScanDirection, found)) continue;
            if (!holds(found, col, running, item.id, item.token)) continue;
        }
        // As the DELETE does: delete the version the snapshot sees, waiting for whoever holds
        // it; a row lock taken up front would cost every completion a WAL record for the rare
        // case. If someone changed it meanwhile, the newest version is deleted if it still holds
        // the token, and nothing is locked if it does not: EvalPlanQual would lock it first and
        // keep the lock after the re-check failed, so a worker that lost the job (its lease taken
        // over while it completed) would hold the new holder's heartbeat and complete, and every
        // claim would skip the job, until its own transaction ended.
        CheckCmdReplicaIdentity(jobs, CMD_DELETE);
        slot_getallattrs(found);
        TupleTableSlot* row = found;
        TM_FailureData tmfd;
        TM_Result res = table_tuple_delete(jobs, &found->tts_tid, cid, snap, InvalidSnapshot, true,
                                           &tmfd, false);
        while (res == TM_Updated) {
            // As the DELETE: a snapshot of the transaction must not see a later version.
            if (IsolationUsesXactSnapshot())
                ereport(ERROR, (errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
                                errmsg("could not serialize access due to concurrent update")));
            // The updater has ended (the delete waited for it): the version now visible is the
            // newest committed one. Deleting it fails, as above, if it changed again since.
            CHECK_FOR_INTERRUPTS();
            Snapshot latest = RegisterSnapshot(GetLatestSnapshot());
            ScanKeyData key;
            ScanKeyEntryInitialize(&key, 0, 1, BTEqualStrategyNumber, InvalidOid, InvalidOid,
                                   F_INT8EQ, Int64GetDatum(item.id));
            IndexScanDesc again = index_beginscan(jobs, idx, latest, 1, 0);
            index_rescan(again, &key, 1, nullptr, 0);
            bool mine = index_getnext_slot(again, ForwardScanDirection, newest) &&
                        holds(newest, col, running, item.id, item.token);
            index_endscan(again);
            if (mine) {
                slot_getallattrs(newest);
                row = newest;
                res = table_tuple_delete(jobs, &newest->tts_tid, cid, latest, InvalidSnapshot, true,
                                         &tmfd, false);
            }
            UnregisterSnapshot(latest);
            if (!mine) break;
        }
        if (res != TM_Ok) continue;  // lost, deleted by someone else, or by this call already

        Datum* v = row->tts_values;
        bool* isnull = row->tts_isnull;
        Datum queue = v[col[kQueue] - 1];
        if (queue_name == (Datum)0 || !DatumGetBool(DirectFunctionCall2Coll(
                                          texteq, DEFAULT_COLLATION_OID, queue_name, queue))) {
            queue_name = PointerGetDatum(pg_detoast_datum_packed(
                reinterpret_cast<struct varlena*>(DatumGetPointer(datumCopy(queue, false, -1)))));
            const char* name = VARDATA_ANY(DatumGetPointer(queue_name));
            int len = static_cast<int>(VARSIZE_ANY_EXHDR(DatumGetPointer(queue_name)));
            if (!queue_rows::recall(name, len, &q)) {
                read_queue(queues, queue_name, snap, &q);
                queue_rows::remember(RelationGetRelid(queues.rel), name, len, q, generation);
            }
            // A job whose queue is gone keeps its history, as the statement's COALESCE says.
            if (!q.found) q.keeps = true, q.notify_done = false;
        }
        if (q.keeps) {
            auto copy = [&](HistoryExtra e, int c) {
                extras[e] = v[col[c] - 1];
                extra_nulls[e] = isnull[col[c] - 1];
            };
            copy(kExtraAttempt, kAttempt);
            copy(kExtraStartedAt, kStartedAt);
            copy(kExtraWorker, kWorker);
            extras[kExtraResult] = item.result;
            extra_nulls[kExtraResult] = item.result_null;
            history_insert(&history, cid, v, isnull, extras, extra_nulls);
        }
        out.done = true;
        out.notify_done = q.notify_done;
        out.limited = q.found && q.limited;
        out.queue = MemoryContextStrdup(caller, TextDatumGetCString(queue));
    }

    index_endscan(scan);
    ExecDropSingleTupleTableSlot(newest);
    ExecDropSingleTupleTableSlot(found);
    history_close(&history);
    close_queues(&queues);
    index_close(idx, NoLock);
    table_close(jobs, NoLock);
    PopActiveSnapshot();
    // What follows in this transaction sees the completions, as after an SPI statement.
    CommandCounterIncrement();
    r->usable = true;
}

}  // namespace

std::optional<std::vector<Done>> complete(const std::vector<Item>& items) {
    Request r{};
    r.items = items.data();
    r.count = static_cast<int>(items.size());
    r.out = pg_guard([&] {
        return static_cast<Outcome*>(palloc0(sizeof(Outcome) * (items.empty() ? 1 : items.size())));
    });
    detail::guarded_call(complete_rows, &r);
    if (!r.usable) return std::nullopt;
    std::vector<Done> done(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
        done[i].done = r.out[i].done;
        done[i].notify_done = r.out[i].notify_done;
        done[i].limited = r.out[i].limited;
        if (r.out[i].queue != nullptr) done[i].queue = r.out[i].queue;
    }
    return done;
}

}  // namespace hopper::direct_complete
