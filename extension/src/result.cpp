// See include/hopper/result.hpp.
#include <memory>
#include <vector>

#include "hopper/result.hpp"

extern "C" {
#include "access/htup_details.h"
#include "utils/tuplestore.h"
}

namespace hopper::result {

SetResult::SetResult(FunctionCallInfo fcinfo) {
    pg_guard([&] { InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC); });
    rsinfo_ = reinterpret_cast<ReturnSetInfo*>(fcinfo->resultinfo);
}

void SetResult::add_row(const spi::Result& r, uint64_t row) {
    int natts = rsinfo_->setDesc->natts;
    std::vector<Datum> values(natts);
    std::vector<bool> nulls(natts);
    for (int i = 0; i < natts; ++i) {
        bool isnull;
        values[i] = r.datum(row, i + 1, &isnull);
        nulls[i] = isnull;
    }
    // std::vector<bool> has no data(); copy into a plain array for the C API.
    std::vector<char> cnulls(nulls.begin(), nulls.end());
    add_values(values.data(), reinterpret_cast<bool*>(cnulls.data()));
}

void SetResult::add_values(Datum* values, bool* nulls) {
    pg_guard([&] { tuplestore_putvalues(rsinfo_->setResult, rsinfo_->setDesc, values, nulls); });
}

Datum composite(FunctionCallInfo fcinfo, const spi::Connection& conn, const spi::Result& r,
                uint64_t row) {
    TupleDesc desc = pg_guard([&] {
        TupleDesc d;
        if (get_call_result_type(fcinfo, nullptr, &d) != TYPEFUNC_COMPOSITE)
            elog(ERROR, "hopper: function must return a composite type");
        return d;
    });
    // Read outside pg_guard: Result throws on a read out of range, and a C++ exception must not
    // leave through its PG_TRY.
    int natts = desc->natts;
    std::vector<Datum> values(natts);
    auto nulls = std::make_unique<bool[]>(natts);
    for (int i = 0; i < natts; ++i) values[i] = r.datum(row, i + 1, &nulls[i]);
    return pg_guard([&] {
        // The row datum too belongs to the caller: for a value stored out of line (TOAST),
        // HeapTupleGetDatum makes a flattened copy, which in SPI's memory would be freed by
        // conn.finish() before the caller reads it.
        MemoryContext old = MemoryContextSwitchTo(conn.caller_context());
        HeapTuple tuple = heap_form_tuple(BlessTupleDesc(desc), values.data(), nulls.get());
        Datum row = HeapTupleGetDatum(tuple);
        MemoryContextSwitchTo(old);
        return row;
    });
}

}  // namespace hopper::result
