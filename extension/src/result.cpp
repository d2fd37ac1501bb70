// See include/hopper/result.hpp.
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
    return pg_guard([&] {
        MemoryContext old = MemoryContextSwitchTo(conn.caller_context());
        TupleDesc desc;
        if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
            elog(ERROR, "hopper: function must return a composite type");
        desc = BlessTupleDesc(desc);
        int natts = desc->natts;
        Datum* values = static_cast<Datum*>(palloc(sizeof(Datum) * natts));
        bool* nulls = static_cast<bool*>(palloc(sizeof(bool) * natts));
        for (int i = 0; i < natts; ++i) values[i] = r.datum(row, i + 1, &nulls[i]);
        HeapTuple tuple = heap_form_tuple(desc, values, nulls);
        MemoryContextSwitchTo(old);
        return HeapTupleGetDatum(tuple);
    });
}

}  // namespace hopper::result
