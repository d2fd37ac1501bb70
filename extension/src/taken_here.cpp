// Jobs taken in the current transaction (include/hopper/taken_here.hpp).
#include "hopper/taken_here.hpp"

#include "hopper/args.hpp"
#include "hopper/guc.hpp"
#include "hopper/jobs.hpp"
#include "hopper/notify.hpp"
#include "hopper/queues.hpp"

#include <algorithm>
#include <iterator>
#include <array>
#include <string>
#include <unordered_map>
#include <vector>

extern "C" {
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "parser/parse_coerce.h"
#include "storage/bufmgr.h"
#include "catalog/namespace.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/snapmgr.h"
}

namespace hopper::taken_here {

namespace {

// Takes of the current top-level transaction, in the order queue_take returned their ids, each with
// the command id current when the take returned and the subtransaction that made it. Both take
// paths advance the command counter past their deletion before returning (as after any SPI
// statement), so the take's own deletion of the job has a command id below that, and any later
// command of the transaction one at or above it. So restore() tells the take's version from one a
// later command deleted: a completion through a lease, a cancel, a queue_fail_taken that buried
// the job it had put back.
//
// A take whose subtransaction rolls back is dropped: its job is free again, and another session
// may take and complete it; the only trace of this transaction's take of a packed job is a packed
// row it wrote, which any later take from that row writes too. A subtransaction's takes are the
// newest of the log when it ends (those of its children were dropped or made its own before), so
// its end touches only its own.
struct Take {
    int64_t id;
    CommandId after_take;
    SubTransactionId subxact;
    size_t previous;  // index of the id's take before this one in the log, or kNone
};
constexpr size_t kNone = static_cast<size_t>(-1);
std::vector<Take> takes;
std::unordered_map<int64_t, size_t> latest_take;  // id -> index of its newest take in `takes`

// At the end of a transaction. One that took a great many jobs does not leave the backend holding
// their log's memory for the rest of the session.
void forget_takes() noexcept {
    constexpr size_t kKept = 4096;
    if (takes.capacity() > kKept) {
        std::vector<Take>().swap(takes);
        std::unordered_map<int64_t, size_t>().swap(latest_take);
    } else {
        takes.clear();
        latest_take.clear();
    }
}
bool callbacks_registered = false;

// Failures queue_fail_taken recorded in the current top-level transaction: the command id current
// when the call began (below that of any later take of the job, above that of any earlier one),
// and the subtransaction that recorded it, so that a rollback to a savepoint forgets a failure it
// undid.
struct Failure {
    CommandId began;
    SubTransactionId subxact;
};
std::unordered_map<int64_t, Failure> failed;

// "hopper:done" of the taken jobs of queues that announce finished jobs, sent just before commit
// rather than by the take: a job put back by restore() was not completed, and a NOTIFY cannot be
// withdrawn once queued. Takes and put-backs are logged in order with the subtransaction that
// made them, so that a savepoint rolled back drops its own (as it drops its NOTIFYs).
struct DoneEvent {
    int64_t id;
    std::string queue;  // empty: restore() put the job back
    SubTransactionId subxact;
};
std::vector<DoneEvent> done_events;

// The jobs still taken at the end of the log, in the order of their (last) take.
void announce_done() {
    struct Pending {
        int64_t id;
        const std::string* queue;
        bool put_back;
    };
    std::vector<Pending> pending;
    std::unordered_map<int64_t, size_t> at;
    for (const DoneEvent& e : done_events) {
        auto it = at.find(e.id);
        if (e.queue.empty()) {
            if (it != at.end()) {
                pending[it->second].put_back = true;
                at.erase(it);
            }
        } else if (it == at.end()) {
            at.emplace(e.id, pending.size());
            pending.push_back({e.id, &e.queue, false});
        }
    }
    for (const Pending& p : pending)
        if (!p.put_back) notify::job_done(p.id, *p.queue, "completed", true);
}

void on_transaction_event(XactEvent event, void*) {
    switch (event) {
        case XACT_EVENT_PRE_COMMIT:
        case XACT_EVENT_PRE_PREPARE:  // where PostgreSQL refuses a transaction that notifies
            if (done_events.empty()) return;
            // Before commit an ERROR still aborts the transaction cleanly.
            if (!detail::capture_errors(announce_done)) {
                done_events.clear();
                detail::raise_saved_error();
            }
            done_events.clear();
            return;
        case XACT_EVENT_COMMIT:
        case XACT_EVENT_ABORT:
        case XACT_EVENT_PREPARE:
        case XACT_EVENT_PARALLEL_COMMIT:
        case XACT_EVENT_PARALLEL_ABORT:
            forget_takes();
            failed.clear();
            done_events.clear();
            return;
        default:
            return;
    }
}

void on_subtransaction_event(SubXactEvent event, SubTransactionId mine, SubTransactionId parent,
                             void*) {
    if (done_events.empty() && failed.empty() && takes.empty()) return;
    if (event == SUBXACT_EVENT_ABORT_SUB) {
        // In place: nothing here may throw into PostgreSQL's abort path.
        while (!takes.empty() && takes.back().subxact == mine) {
            const Take& t = takes.back();
            auto it = latest_take.find(t.id);
            // Not named when remember() ran out of memory between logging and naming it.
            if (it != latest_take.end() && it->second == takes.size() - 1) {
                if (t.previous == kNone)
                    latest_take.erase(it);
                else
                    it->second = t.previous;
            }
            takes.pop_back();
        }
        done_events.erase(std::remove_if(done_events.begin(), done_events.end(),
                                         [&](const DoneEvent& e) { return e.subxact == mine; }),
                          done_events.end());
        for (auto it = failed.begin(); it != failed.end();)
            it = it->second.subxact == mine ? failed.erase(it) : std::next(it);
    } else if (event == SUBXACT_EVENT_COMMIT_SUB) {
        for (auto t = takes.rbegin(); t != takes.rend() && t->subxact == mine; ++t)
            t->subxact = parent;
        for (DoneEvent& e : done_events)
            if (e.subxact == mine) e.subxact = parent;
        for (auto& [id, f] : failed)
            if (f.subxact == mine) f.subxact = parent;
    }
}

void register_callbacks() {
    if (callbacks_registered) return;
    pg_guard([] {
        RegisterXactCallback(on_transaction_event, nullptr);
        RegisterSubXactCallback(on_subtransaction_event, nullptr);
    });
    callbacks_registered = true;
}

void log_done_event(int64_t id, const std::string& queue) {
    done_events.push_back({id, queue, GetCurrentSubTransactionId()});
}

// The columns a restored job gets back; the rest (state, lease, claimed_*) take their defaults,
// which is what an available job has.
constexpr std::array<const char*, 17> kColumns = {
    "id",         "queue",      "priority", "run_at",          "attempt",   "max_attempts",
    "created_at", "started_at", "kind",     "worker",          "dedup_key", "concurrency_key",
    "progress",   "last_error", "errors",   "progress_detail", "payload"};
// Their types, as the statement that puts the job back (restore()) takes its values.
constexpr std::array<Oid, kColumns.size()> kTypes = {
    INT8OID,        TEXTOID,        INT2OID,  TIMESTAMPTZOID, INT4OID, INT4OID,
    TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID,  TEXTOID,        TEXTOID, TEXTOID,
    FLOAT4OID,      TEXTOID,        JSONBOID, JSONBOID,       JSONBOID};

struct Row {
    bool found = false;
    CommandId deleted_by = InvalidCommandId;  // the command that deleted the version read
    std::array<Datum, kColumns.size()> values{};
    std::array<bool, kColumns.size()> nulls{};
};

// A copy of the version in `slot` if the current transaction deleted it (not updated it, not
// just locked it), with the command that did; NULL otherwise.
HeapTuple copy_if_deleted_here(TupleTableSlot* slot, CommandId* cmax) {
    Buffer buf = ((BufferHeapTupleTableSlot*)slot)->buffer;
    bool should_free;
    HeapTuple tup = ExecFetchSlotHeapTuple(slot, false, &should_free);
    LockBuffer(buf, BUFFER_LOCK_SHARE);
    HeapTupleHeader h = tup->t_data;
    bool deleted_here = !(h->t_infomask & HEAP_XMAX_INVALID) &&
                        !HEAP_XMAX_IS_LOCKED_ONLY(h->t_infomask) &&
                        ItemPointerEquals(&tup->t_self, &h->t_ctid) &&
                        TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetUpdateXid(h));
    HeapTuple copy = NULL;
    if (deleted_here) {
        *cmax = HeapTupleHeaderGetCmax(h);
        copy = heap_copytuple(tup);
    }
    LockBuffer(buf, BUFFER_LOCK_UNLOCK);
    if (should_free) heap_freetuple(tup);
    return copy;
}

// The newest version of job `id` that the current transaction deleted (not updated, not just
// locked), with kColumns read from a copy of it and the command that deleted it. Plain C inside:
// runs under pg_guard.
void read_deleted_version(Oid relid, int64_t id, Row* out) {
    Relation rel = table_open(relid, AccessShareLock);
    Relation idx = index_open(RelationGetPrimaryKeyIndex(rel), AccessShareLock);
    ScanKeyData key;
    ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(id));
    // Every version the index points at, dead or alive: the one this transaction deleted is
    // invisible to any MVCC snapshot of its own.
    IndexScanDesc scan = index_beginscan(rel, idx, SnapshotAny, 1, 0);
    index_rescan(scan, &key, 1, NULL, 0);
    TupleTableSlot* slot = table_slot_create(rel, NULL);
    HeapTuple best = NULL;
    CommandId best_cmax = InvalidCommandId;
    while (index_getnext_slot(scan, ForwardScanDirection, slot)) {
        CommandId cmax;
        HeapTuple copy = copy_if_deleted_here(slot, &cmax);
        if (copy == NULL) continue;
        if (best == NULL || cmax > best_cmax) {
            if (best != NULL) heap_freetuple(best);
            best = copy;
            best_cmax = cmax;
        } else {
            heap_freetuple(copy);
        }
    }
    if (best != NULL) {
        TupleDesc desc = RelationGetDescr(rel);
        for (size_t i = 0; i < kColumns.size(); ++i) {
            int attnum = SPI_fnumber(desc, kColumns[i]);
            if (attnum <= 0) elog(ERROR, "hopper: hopper.jobs has no column %s", kColumns[i]);
            // The version's values go back as they are, as the types the statement takes: a
            // column whose type was changed to one not stored as that (varchar is, json is not)
            // would hand it a value of another type.
            Form_pg_attribute att = TupleDescAttr(desc, attnum - 1);
            if (!IsBinaryCoercible(att->atttypid, kTypes[i]))
                ereport(ERROR,
                        (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                         errmsg("hopper: cannot put job %lld back: column hopper.jobs.%s is of "
                                "type %s, not %s",
                                static_cast<long long>(id), kColumns[i],
                                format_type_with_typemod(att->atttypid, att->atttypmod),
                                format_type_be(kTypes[i]))));
            out->values[i] = heap_getattr(best, attnum, desc, &out->nulls[i]);
        }
        out->found = true;
        out->deleted_by = best_cmax;
    }
    ExecDropSingleTupleTableSlot(slot);
    index_endscan(scan);
    index_close(idx, AccessShareLock);
    table_close(rel, AccessShareLock);
}

// The job at `id` of the packed row version that the current transaction deleted (a take that
// emptied the row), rebuilt as it waited, into `out`. Rows of concurrent batches interleave their
// ids, so the walk goes down the primary key from the id, past the versions deleted by others,
// to the one deleted here that lists it. Plain C inside: runs under pg_guard.
void read_deleted_packed_version(int64_t id, Row* out) {
    Oid relid = get_relname_relid("job_batches", get_namespace_oid("hopper", false));
    Relation rel = table_open(relid, AccessShareLock);
    Relation idx = index_open(RelationGetPrimaryKeyIndex(rel), AccessShareLock);
    TupleDesc desc = RelationGetDescr(rel);
    ScanKeyData key;
    ScanKeyInit(&key, 1, BTLessEqualStrategyNumber, F_INT8LE, Int64GetDatum(id));
    IndexScanDesc scan = index_beginscan(rel, idx, SnapshotAny, 1, 0);
    index_rescan(scan, &key, 1, NULL, 0);
    TupleTableSlot* slot = table_slot_create(rel, NULL);
    // Each column read as the type the install script gave it, as read_deleted_version's.
    auto attnum = [&](const char* name, Oid type) {
        int n = SPI_fnumber(desc, name);
        if (n <= 0) elog(ERROR, "hopper: hopper.job_batches has no column %s", name);
        Form_pg_attribute att = TupleDescAttr(desc, n - 1);
        if (!IsBinaryCoercible(att->atttypid, type))
            ereport(ERROR,
                    (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                     errmsg("hopper: cannot put job %lld back: column hopper.job_batches.%s is of "
                            "type %s, not %s",
                            static_cast<long long>(id), name,
                            format_type_with_typemod(att->atttypid, att->atttypmod),
                            format_type_be(type))));
        return n;
    };
    const int ids_att = attnum("ids", INT8ARRAYOID),
              payloads_att = attnum("payloads", JSONBARRAYOID);
    while (!out->found && index_getnext_slot(scan, BackwardScanDirection, slot)) {
        CommandId cmax;
        HeapTuple copy = copy_if_deleted_here(slot, &cmax);
        if (copy == NULL) continue;
        // Outside the buffer lock: the arrays may have to be read from the TOAST table.
        bool isnull;
        Datum ids_datum = heap_getattr(copy, ids_att, desc, &isnull);
        if (isnull) continue;
        Datum* ids;
        int n;
        deconstruct_array(DatumGetArrayTypeP(ids_datum), INT8OID, sizeof(int64), FLOAT8PASSBYVAL,
                          TYPALIGN_DOUBLE, &ids, NULL, &n);
        int at = -1;
        for (int i = 0; i < n && at < 0; ++i)
            if (DatumGetInt64(ids[i]) == id) at = i;
        if (at < 0) continue;
        Datum payloads_datum = heap_getattr(copy, payloads_att, desc, &isnull);
        if (isnull) continue;
        Datum* payloads;
        bool* payload_nulls;
        int m;
        deconstruct_array(DatumGetArrayTypeP(payloads_datum), JSONBOID, -1, false, TYPALIGN_INT,
                          &payloads, &payload_nulls, &m);
        if (at >= m) continue;
        out->nulls.fill(true);
        auto column = [&](size_t i, const char* name) {
            out->values[i] = heap_getattr(copy, attnum(name, kTypes[i]), desc, &out->nulls[i]);
        };
        out->values[0] = Int64GetDatum(id);
        out->nulls[0] = false;
        column(1, "queue");
        column(2, "priority");
        column(3, "run_at");
        out->values[4] = Int32GetDatum(0);
        out->nulls[4] = false;
        column(5, "max_attempts");
        column(6, "created_at");
        column(8, "kind");
        out->values[16] = payloads[at];
        out->nulls[16] = payload_nulls[at];
        out->found = true;
    }
    ExecDropSingleTupleTableSlot(slot);
    index_endscan(scan);
    index_close(idx, AccessShareLock);
    table_close(rel, AccessShareLock);
}

// A job taken from a packed row (include/hopper/batches.hpp) left no deleted row in hopper.jobs.
// It is rebuilt as it waited (attempt 0, no worker) from what this transaction wrote when it took
// it: the history row of the take or, in a queue that keeps no history, the packed row whose
// front the take moved past it, or the packed row the take emptied and deleted. A row written by
// anyone else means the job is not ours.
bool read_packed_version(spi::Connection& conn, int64_t id, Row* out) {
    static spi::Statement st(
        "SELECT * FROM ("
        "  SELECT h.id::bigint, h.queue::text, h.priority::smallint, h.run_at::timestamptz, "
        "    h.attempt::integer - 1, h.max_attempts::integer, h.created_at::timestamptz, "
        "    NULL::timestamptz, h.kind::text, NULL::text, NULL::text, NULL::text, "
        "    NULL::real, NULL::text, NULL::jsonb, NULL::jsonb, h.payload::jsonb, h.xmin, 0 AS pref "
        "  FROM hopper.job_history h WHERE h.id = $1 "
        "    AND h.state OPERATOR(pg_catalog.=) 'completed' "
        "  UNION ALL "
        "  SELECT $1, b.queue::text, b.priority::smallint, b.run_at::timestamptz, 0, "
        "    b.max_attempts::integer, b.created_at::timestamptz, NULL, b.kind::text, "
        "    NULL, NULL, NULL, NULL, NULL, NULL, NULL, b.payloads[p.i]::jsonb, b.xmin, 1 "
        "  FROM hopper.job_batches b, LATERAL (SELECT pg_catalog.array_position(b.ids, $1) AS i) p "
        "  WHERE b.first_id <= $1 AND b.last_id >= $1 AND p.i <= b.taken) v "
        "ORDER BY pref LIMIT 1",
        {INT8OID}, spi::Planning::kWalkIndexes);
    spi::Result r = conn.exec(st, {spi::arg(id)});
    if (r.empty()) {
        pg_guard([&] { read_deleted_packed_version(id, out); });
        return out->found;
    }
    bool isnull = false;
    Datum xmin = r.datum(0, 18, &isnull);
    bool ours =
        pg_guard([&] { return TransactionIdIsCurrentTransactionId(DatumGetTransactionId(xmin)); });
    if (!ours) return false;
    for (size_t i = 0; i < kColumns.size(); ++i)
        out->values[i] = r.datum(0, static_cast<int>(i) + 1, &out->nulls[i]);
    out->found = true;
    return true;
}

}  // namespace

void remember(int64_t id, const std::string& queue, bool queue_notifies_done) {
    register_callbacks();
    // Read only, not marked used: the take's cost and command counter are as they were.
    auto before = latest_take.find(id);
    takes.push_back({id, GetCurrentCommandId(false), GetCurrentSubTransactionId(),
                     before == latest_take.end() ? kNone : before->second});
    latest_take[id] = takes.size() - 1;
    if (queue_notifies_done && guc::notify) log_done_event(id, queue);
}

bool restore(spi::Connection& conn, int64_t id) {
    auto it = latest_take.find(id);
    if (it == latest_take.end()) return false;
    const CommandId after_take = takes[it->second].after_take;
    static spi::Statement visible("SELECT 1 FROM hopper.jobs WHERE id = $1", {INT8OID},
                                  spi::Planning::kWalkIndexes);
    if (!conn.exec(visible, {spi::arg(id)}).empty()) return false;  // back already, or never out
    Oid relid = jobs::relation();  // valid: the statement above just read the table
    Row row;
    pg_guard([&] { read_deleted_version(relid, id, &row); });
    // Deleted by a command after the take: this transaction finished the job since (the take
    // rolled back, or a put-back job was run or failed again). Its version is not the take's, and
    // the history row is that finish's own.
    if (row.found && row.deleted_by >= after_take) return false;
    if (!row.found && !read_packed_version(conn, id, &row))
        return false;  // the take rolled back and someone else finished the job since

    // Back into the queue as a push would go (queues::hold); a drop waiting for this
    // transaction's take meanwhile ends in a deadlock error for one of the two.
    auto string_of = [](Datum d) {
        char* s = pg_guard([&] { return TextDatumGetCString(d); });
        std::string out(s);
        pfree(s);
        return out;
    };
    const std::string queue = string_of(row.values[1]);
    queues::hold(conn, queue);
    // Its dedup key may have gone to a job this transaction pushed since the take: two unfinished
    // jobs never share one. No other transaction can have it: its push of the key waits for this
    // one's deletion of the job. Named as queue_retry names the holder, not the unique index's
    // bare 23505.
    if (!row.nulls[10]) {
        const std::string key = string_of(row.values[10]);
        static spi::Statement key_holder(
            "SELECT id FROM hopper.jobs WHERE queue = $1 AND dedup_key = $2 LIMIT 1",
            {TEXTOID, TEXTOID}, spi::Planning::kWalkIndexes);
        spi::Result h = conn.exec(key_holder, {spi::arg_text(queue), spi::arg_text(key)});
        if (!h.empty())
            throw PgError(ERRCODE_UNIQUE_VIOLATION,
                          "job " + std::to_string(id) + " cannot be put back: its dedup key \"" +
                              args::clip(key, 200) + "\" belongs to unfinished job " +
                              std::to_string(h.get_int64(0, 1)),
                          {},
                          "The key was pushed again after the take. Record the failure before "
                          "pushing the key again.");
    }
    static spi::Statement reinsert(
        "INSERT INTO hopper.jobs (id, queue, priority, run_at, attempt, max_attempts, created_at, "
        "started_at, kind, worker, dedup_key, concurrency_key, progress, last_error, errors, "
        "progress_detail, payload) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17)",
        {INT8OID, TEXTOID, INT2OID, TIMESTAMPTZOID, INT4OID, INT4OID, TIMESTAMPTZOID,
         TIMESTAMPTZOID, TEXTOID, TEXTOID, TEXTOID, TEXTOID, FLOAT4OID, TEXTOID, JSONBOID, JSONBOID,
         JSONBOID});
    auto a = [&](size_t i) { return spi::arg_datum(row.values[i], row.nulls[i]); };
    conn.exec(reinsert, {a(0), a(1), a(2), a(3), a(4), a(5), a(6), a(7), a(8), a(9), a(10), a(11),
                         a(12), a(13), a(14), a(15), a(16)});
    // The take wrote the job to history as completed; a job is in one table at a time.
    static spi::Statement unrecord(
        "DELETE FROM hopper.job_history WHERE id = $1 "
        "AND state OPERATOR(pg_catalog.=) 'completed'",
        {INT8OID});
    conn.exec(unrecord, {spi::arg(id)});
    if (!done_events.empty()) log_done_event(id, std::string());
    return true;
}

void remember_failure(int64_t id, CommandId began) {
    register_callbacks();
    failed[id] = Failure{began, GetCurrentSubTransactionId()};
}

bool failed_since_take(int64_t id) {
    auto f = failed.find(id);
    if (f == failed.end()) return false;
    auto t = latest_take.find(id);
    return t == latest_take.end() || f->second.began >= takes[t->second].after_take;
}

}  // namespace hopper::taken_here
