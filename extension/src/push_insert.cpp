// See include/hopper/push_insert.hpp.
#include <cstring>
#include <vector>

#include "hopper/boundary.hpp"
#include "hopper/direct_insert.hpp"
#include "hopper/push_insert.hpp"

extern "C" {
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_enum.h"
#include "commands/sequence.h"
#include "executor/executor.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"
}

namespace hopper::push {
namespace {

struct Row {
    const Job* job;
    int32_t max_attempts;
    int64_t id;
    bool inserted;
};

Datum text_datum(const std::string& s) {
    return PointerGetDatum(cstring_to_text_with_len(s.data(), static_cast<int>(s.size())));
}

Datum text_or_null(const std::optional<std::string>& s, bool* isnull) {
    *isnull = !s.has_value();
    return s ? text_datum(*s) : (Datum)0;
}

// Fills the slot's values from the job by column name. False: a column this code does not know
// (a later version's, or one added by hand), whose value only the SQL INSERT can tell.
bool fill(TupleDesc desc, Row& row, Datum* values, bool* isnull, Oid seq, bool check_sequence) {
    const Job& job = *row.job;
    TimestampTz now = GetCurrentTransactionStartTimestamp();
    for (int i = 0; i < desc->natts; ++i) {
        Form_pg_attribute att = TupleDescAttr(desc, i);
        values[i] = (Datum)0;
        isnull[i] = true;
        if (att->attisdropped) continue;
        const char* name = NameStr(att->attname);
        auto is = [&](const char* n) { return std::strcmp(name, n) == 0; };
        isnull[i] = false;
        if (is("id")) {
            row.id = nextval_internal(seq, check_sequence);
            values[i] = Int64GetDatum(row.id);
        } else if (is("queue")) {
            values[i] = text_datum(job.queue);
        } else if (is("state")) {
            Oid label =
                GetSysCacheOid2(ENUMTYPOIDNAME, Anum_pg_enum_oid, ObjectIdGetDatum(att->atttypid),
                                CStringGetDatum("available"));
            if (!OidIsValid(label)) return false;
            values[i] = ObjectIdGetDatum(label);
        } else if (is("priority")) {
            values[i] = Int16GetDatum(job.priority);
        } else if (is("run_at")) {
            values[i] = TimestampTzGetDatum(job.run_at.value_or(now));
        } else if (is("attempt")) {
            values[i] = Int32GetDatum(0);
        } else if (is("max_attempts")) {
            values[i] = Int32GetDatum(row.max_attempts);
        } else if (is("session_bound")) {
            values[i] = BoolGetDatum(false);
        } else if (is("created_at")) {
            values[i] = TimestampTzGetDatum(now);
        } else if (is("kind")) {
            values[i] = text_or_null(job.kind, &isnull[i]);
        } else if (is("concurrency_key")) {
            values[i] = text_or_null(job.concurrency_key, &isnull[i]);
        } else if (is("payload")) {
            values[i] = job.payload;
        } else if (is("lease_token") || is("lease_until") || is("claimed_pid") ||
                   is("claimed_backend_start") || is("started_at") || is("worker") ||
                   is("dedup_key") || is("progress") || is("last_error") || is("errors") ||
                   is("progress_detail")) {
            isnull[i] = true;
        } else {
            return false;
        }
    }
    return true;
}

// hopper.jobs opened for a direct insert (see direct_insert::open_plain) and its id sequence;
// nullptr if either is missing or the table asks for the SQL INSERT.
Relation open_jobs(Oid* seq) {
    Oid ns = get_namespace_oid("hopper", false);
    Oid relid = get_relname_relid("jobs", ns);
    *seq = get_relname_relid("job_id_seq", ns);
    if (!OidIsValid(relid) || !OidIsValid(*seq)) return nullptr;
    return direct_insert::open_plain(relid);
}

// Plain C over PostgreSQL's API, run under pg_guard: no C++ object with a destructor lives here.
void insert_row(void* arg) {
    Row& row = *static_cast<Row*>(arg);
    row.inserted = false;
    Oid seq;
    Relation rel = open_jobs(&seq);
    if (rel == nullptr) return;
    direct_insert::Inserter in;
    direct_insert::begin(rel, &in);
    if (fill(RelationGetDescr(rel), row, in.slot->tts_values, in.slot->tts_isnull, seq, true)) {
        direct_insert::insert(&in);
        row.inserted = true;
    }
    // What follows in this transaction (a dedup window's look, the caller's next statement) sees
    // the row.
    direct_insert::end(rel, &in, row.inserted);
}

struct BatchRows {
    const Job* jobs;  // n of them, of one queue, in payload order
    int n;
    int32_t max_attempts;
    int64_t* ids;  // n of them, filled here
    bool inserted;
};

// Rows written with one heap_multi_insert, as COPY holds them back.
constexpr int kRowsPerWrite = 100;

// Plain C over PostgreSQL's API, run under pg_guard: no C++ object with a destructor lives here.
void insert_rows(void* arg) {
    BatchRows& rows = *static_cast<BatchRows*>(arg);
    rows.inserted = false;
    Oid seq;
    Relation rel = open_jobs(&seq);
    if (rel == nullptr) return;
    direct_insert::Inserter in;
    direct_insert::begin(rel, &in);
    TupleDesc desc = RelationGetDescr(rel);
    CheckCmdReplicaIdentity(rel, CMD_INSERT);
    TupleTableSlot* slots[kRowsPerWrite];
    int made = 0;
    int held = 0;
    for (int i = 0; i < rows.n; ++i) {
        Row row{&rows.jobs[i], rows.max_attempts, 0, false};
        MemoryContext outer = MemoryContextSwitchTo(GetPerTupleMemoryContext(in.estate));
        // The first draw checks the caller's right to the sequence, which holds for the rest.
        bool known = fill(desc, row, in.slot->tts_values, in.slot->tts_isnull, seq, i == 0);
        MemoryContextSwitchTo(outer);
        if (!known) {
            // What fill() refuses is the table's, the same for every row: the first one finds it,
            // before anything is written, and the SQL INSERT takes the whole batch.
            if (i > 0) elog(ERROR, "hopper: row %d of a batch refused after the first", i + 1);
            direct_insert::end(rel, &in, false);
            return;
        }
        rows.ids[i] = row.id;
        ExecStoreVirtualTuple(in.slot);
        outer = MemoryContextSwitchTo(GetPerTupleMemoryContext(in.estate));
        direct_insert::open_indexes_for(&in, in.slot);
        if (desc->constr) ExecConstraints(in.rri, in.slot, in.estate);
        MemoryContextSwitchTo(outer);
        if (held == made) slots[made++] = table_slot_create(rel, &in.estate->es_tupleTable);
        // The copy owns its values; the text values fill() made are freed with the row's memory.
        ExecCopySlot(slots[held++], in.slot);
        ExecClearTuple(in.slot);
        ResetPerTupleExprContext(in.estate);
        if (held == kRowsPerWrite) {
            direct_insert::write_held(&in, slots, held);
            held = 0;
        }
    }
    if (held > 0) direct_insert::write_held(&in, slots, held);
    rows.inserted = true;
    direct_insert::end(rel, &in, true);
}

}  // namespace

std::optional<std::vector<int64_t>> insert_direct(const std::vector<Job>& jobs,
                                                  int32_t max_attempts) {
    std::vector<int64_t> ids(jobs.size());
    BatchRows rows{jobs.data(), static_cast<int>(jobs.size()), max_attempts, ids.data(), false};
    detail::guarded_call(insert_rows, &rows);
    if (!rows.inserted) return std::nullopt;
    return ids;
}

std::optional<int64_t> insert_direct(const Job& job, int32_t max_attempts) {
    Row row{&job, max_attempts, 0, false};
    detail::guarded_call(insert_row, &row);
    if (!row.inserted) return std::nullopt;
    return row.id;
}

}  // namespace hopper::push
