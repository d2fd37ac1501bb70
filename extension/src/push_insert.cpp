// See include/hopper/push_insert.hpp.
#include <cstring>
#include <vector>

#include "hopper/boundary.hpp"
#include "hopper/direct_access.hpp"
#include "hopper/direct_insert.hpp"
#include "hopper/push_insert.hpp"
#include "hopper/table_columns.hpp"
#include "hopper/table_layout.hpp"

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

using namespace jobs_table;

// A column of hopper.jobs in the map below: one of jobs_table's, kColumns for one this code does
// not know or one of another type than the install script's (whose values fill() would write as
// the wrong type), or kDropped.
constexpr int kDropped = -1;

// The table's columns, and its state type's 'available' label. The column map is remembered per
// backend with the table's other looked-up facts (include/hopper/table_layout.hpp): matching 23
// names per row was a tenth of a batch push's CPU.
struct Layout {
    int natts;
    int columns[table_layout::kMaxValues];
    Oid available;
};

// The key of the column map in table_layout's memory.
const char kLayoutKey = 0;

// False: a column this code does not know (a later version's, or one added by hand), whose value
// only the SQL INSERT can tell, a column whose type or typmod was changed, which only the INSERT
// casts to (or refuses), more columns than the map holds, or a state type without 'available'.
bool layout_of(Relation rel, Layout* out) {
    TupleDesc desc = RelationGetDescr(rel);
    if (desc->natts > table_layout::kMaxValues) return false;
    Oid relid = RelationGetRelid(rel);
    int* columns = out->columns;
    if (!table_layout::recall(&kLayoutKey, relid, columns, desc->natts)) {
        uint64 since = table_layout::generation();
        for (int i = 0; i < desc->natts; ++i) {
            Form_pg_attribute att = TupleDescAttr(desc, i);
            if (att->attisdropped) {
                columns[i] = kDropped;
                continue;
            }
            columns[i] = column_named(kNames, kColumns, NameStr(att->attname));
            if (columns[i] != kColumns && !table_layout::typed(att, kTypes[columns[i]]))
                columns[i] = kColumns;
        }
        table_layout::remember(&kLayoutKey, &relid, 1, columns, desc->natts, since);
    }
    out->natts = desc->natts;
    out->available = InvalidOid;
    for (int i = 0; i < desc->natts; ++i) {
        if (columns[i] == kColumns) return false;
        if (columns[i] == kState) {
            out->available = GetSysCacheOid2(ENUMTYPOIDNAME, Anum_pg_enum_oid,
                                             ObjectIdGetDatum(TupleDescAttr(desc, i)->atttypid),
                                             CStringGetDatum("available"));
            if (!OidIsValid(out->available)) return false;
        }
    }
    return true;
}

// Fills a row's values from the job; draws its id.
void fill(const Layout& layout, Row& row, Datum* values, bool* isnull, Oid seq,
          bool check_sequence) {
    const Job& job = *row.job;
    TimestampTz now = GetCurrentTransactionStartTimestamp();
    for (int i = 0; i < layout.natts; ++i) {
        values[i] = (Datum)0;
        isnull[i] = false;
        switch (layout.columns[i]) {
            case kId:
                row.id = nextval_internal(seq, check_sequence);
                values[i] = Int64GetDatum(row.id);
                break;
            case kQueue:
                values[i] = text_datum(job.queue);
                break;
            case kState:
                values[i] = ObjectIdGetDatum(layout.available);
                break;
            case kPriority:
                values[i] = Int16GetDatum(job.priority);
                break;
            case kRunAt:
                values[i] = TimestampTzGetDatum(job.run_at.value_or(now));
                break;
            case kAttempt:
                values[i] = Int32GetDatum(0);
                break;
            case kMaxAttempts:
                values[i] = Int32GetDatum(row.max_attempts);
                break;
            case kSessionBound:
                values[i] = BoolGetDatum(false);
                break;
            case kCreatedAt:
                values[i] = TimestampTzGetDatum(now);
                break;
            case kKind:
                values[i] = text_or_null(job.kind, &isnull[i]);
                break;
            case kConcurrencyKey:
                values[i] = text_or_null(job.concurrency_key, &isnull[i]);
                break;
            case kPayload:
                values[i] = job.payload;
                break;
            default:  // what a pushed job leaves NULL (its lease, progress, errors), or dropped
                isnull[i] = true;
                break;
        }
    }
}

// hopper.jobs opened for a direct insert (see direct_insert::open_plain) and its id sequence;
// nullptr if either is missing or the table asks for the SQL INSERT.
Relation open_jobs(Oid* seq) {
    direct_access::Tables t;
    if (!direct_access::tables(&t)) return nullptr;
    *seq = t.job_id;
    return direct_insert::open_plain(t.jobs);
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
    Layout layout;
    if (layout_of(rel, &layout)) {
        fill(layout, row, in.slot->tts_values, in.slot->tts_isnull, seq, true);
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
    Layout layout;
    if (!layout_of(rel, &layout)) {
        direct_insert::end(rel, &in, false);
        return;
    }
    CheckCmdReplicaIdentity(rel, CMD_INSERT);
    TupleTableSlot* slots[kRowsPerWrite];
    int made = 0;
    int held = 0;
    for (int i = 0; i < rows.n; ++i) {
        Row row{&rows.jobs[i], rows.max_attempts, 0, false};
        MemoryContext outer = MemoryContextSwitchTo(GetPerTupleMemoryContext(in.estate));
        // The first draw checks the caller's right to the sequence, which holds for the rest.
        fill(layout, row, in.slot->tts_values, in.slot->tts_isnull, seq, i == 0);
        rows.ids[i] = row.id;
        ExecStoreVirtualTuple(in.slot);
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
