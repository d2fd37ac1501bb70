// See include/hopper/batch_insert.hpp.

#include "hopper/batch_insert.hpp"
#include "hopper/boundary.hpp"
#include "hopper/direct_access.hpp"
#include "hopper/direct_insert.hpp"
#include "hopper/table_columns.hpp"
#include "hopper/table_layout.hpp"

extern "C" {
#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
}

namespace hopper::batches {
namespace {

struct Rows {
    const Push* batch;
    int32_t max_attempts;
    int64_t* ids;  // batch->jobs of them, filled here
    bool inserted;
};

using namespace batches_table;

Column column_of(const char* name) {
    return static_cast<Column>(column_named(kNames, kColumns, name));
}

// Plain C over PostgreSQL's API, run under pg_guard: no C++ object with a destructor lives here.
void insert_rows(void* arg) {
    Rows& rows = *static_cast<Rows*>(arg);
    const Push& batch = *rows.batch;
    rows.inserted = false;
    direct_access::Tables t;
    if (!direct_access::tables(&t)) return;
    Oid seq = t.job_id;
    Relation rel = direct_insert::open_plain(t.batches);
    if (rel == nullptr) return;
    TupleDesc desc = RelationGetDescr(rel);
    // A column it does not know, or of another type than the install script's: the SQL INSERT
    // fills in the default, or casts (or refuses) the value.
    for (int i = 0; i < desc->natts; ++i) {
        Form_pg_attribute att = TupleDescAttr(desc, i);
        if (att->attisdropped) continue;
        Column c = column_of(NameStr(att->attname));
        if (c == kColumns || !table_layout::typed(att, kTypes[c])) {
            table_close(rel, NoLock);
            return;
        }
    }

    Datum* payloads;
    bool* payload_nulls;
    int n;
    deconstruct_array(DatumGetArrayTypeP(batch.payloads), JSONBOID, -1, false, TYPALIGN_INT,
                      &payloads, &payload_nulls, &n);
    if (n != batch.jobs)
        elog(ERROR, "hopper: a packed batch of %d payloads, %ld expected", n,
             static_cast<long>(batch.jobs));
    // All ids first, in payload order, as the SQL INSERT drew them. The first draw checks the
    // caller's right to the sequence, which holds for the rest of the batch.
    for (int i = 0; i < n; ++i) rows.ids[i] = nextval_internal(seq, /*check_permissions=*/i == 0);

    direct_insert::Inserter in;
    direct_insert::begin(rel, &in);
    TupleTableSlot* slot = in.slot;
    MemoryContext per_row =
        AllocSetContextCreate(CurrentMemoryContext, "hopper packed row", ALLOCSET_DEFAULT_SIZES);
    TimestampTz now = GetCurrentTransactionStartTimestamp();
    Datum queue = PointerGetDatum(
        cstring_to_text_with_len(batch.queue.data(), static_cast<int>(batch.queue.size())));
    Datum kind = batch.kind ? PointerGetDatum(cstring_to_text_with_len(
                                  batch.kind->data(), static_cast<int>(batch.kind->size())))
                            : (Datum)0;
    for (int s = 0; s < n; s += kJobsPerRow) {
        int e = s + kJobsPerRow < n ? s + kJobsPerRow : n;
        MemoryContext outer = MemoryContextSwitchTo(per_row);
        Datum* id_values = static_cast<Datum*>(palloc(sizeof(Datum) * (e - s)));
        for (int i = s; i < e; ++i) id_values[i - s] = Int64GetDatum(rows.ids[i]);
        ArrayType* ids = construct_array(id_values, e - s, INT8OID, sizeof(int64), FLOAT8PASSBYVAL,
                                         TYPALIGN_DOUBLE);
        ArrayType* slice = construct_array(payloads + s, e - s, JSONBOID, -1, false, TYPALIGN_INT);
        MemoryContextSwitchTo(outer);
        for (int i = 0; i < desc->natts; ++i) {
            Form_pg_attribute att = TupleDescAttr(desc, i);
            Datum& v = slot->tts_values[i];
            bool& isnull = slot->tts_isnull[i];
            v = (Datum)0;
            isnull = att->attisdropped;
            if (isnull) continue;
            switch (column_of(NameStr(att->attname))) {
                case kFirstId:
                    v = Int64GetDatum(rows.ids[s]);
                    break;
                case kLastId:
                    v = Int64GetDatum(rows.ids[e - 1]);
                    break;
                case kQueue:
                    v = queue;
                    break;
                case kPriority:
                    v = Int16GetDatum(batch.priority);
                    break;
                case kRunAt:
                    v = TimestampTzGetDatum(batch.run_at.value_or(now));
                    break;
                case kCreatedAt:
                    v = TimestampTzGetDatum(now);
                    break;
                case kKind:
                    v = kind;
                    isnull = !batch.kind;
                    break;
                case kMaxAttempts:
                    v = Int32GetDatum(rows.max_attempts);
                    break;
                case kTaken:
                    v = Int32GetDatum(0);
                    break;
                case kIds:
                    v = PointerGetDatum(ids);
                    break;
                case kPayloads:
                    v = PointerGetDatum(slice);
                    break;
                case kColumns:
                    break;  // refused above
            }
        }
        direct_insert::insert(&in);
        MemoryContextReset(per_row);
    }
    MemoryContextDelete(per_row);
    // What follows in this transaction sees the rows.
    direct_insert::end(rel, &in, true);
    rows.inserted = true;
}

}  // namespace

std::optional<std::vector<int64_t>> insert_direct(const Push& batch, int32_t max_attempts) {
    std::vector<int64_t> ids(static_cast<size_t>(batch.jobs));
    Rows rows{&batch, max_attempts, ids.data(), false};
    detail::guarded_call(insert_rows, &rows);
    if (!rows.inserted) return std::nullopt;
    return ids;
}

}  // namespace hopper::batches
