// Handing SPI rows back to the caller: as a set (materialized) or as one composite row.
#pragma once

#include "hopper/spi.hpp"

extern "C" {
#include "funcapi.h"
}

namespace hopper::result {

// A set-returning function's result, materialized into a tuplestore in the per-query context, so
// rows stay valid after SPI_finish. Create it before the spi::Connection.
class SetResult {
  public:
    explicit SetResult(FunctionCallInfo fcinfo);
    // Appends SPI row `row`, whose columns must match the function's declared result columns.
    void add_row(const spi::Result& r, uint64_t row);
    void add_values(Datum* values, bool* nulls);

  private:
    ReturnSetInfo* rsinfo_;
};

// Builds the function's composite result from SPI row `row`, in the caller's memory context.
Datum composite(FunctionCallInfo fcinfo, const spi::Connection& conn, const spi::Result& r,
                uint64_t row);

}  // namespace hopper::result
