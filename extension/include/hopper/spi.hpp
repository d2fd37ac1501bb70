// SPI with plans prepared once per backend and kept (SPI_prepare + SPI_keepplan): within a few
// percent of plain SQL, where re-planning each call costs ~1.8x. Every call into SPI goes through
// pg_guard.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hopper/boundary.hpp"

extern "C" {
#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "utils/resowner.h"
#include "utils/snapshot.h"
}

namespace hopper::spi {

// Parameters one statement may take.
constexpr size_t kMaxArgs = 20;

// How a statement's plans are made. kWalkIndexes is for statements on the hot tables whose cached
// plan must walk an index however the statistics looked when it was made (see Statement).
enum class Planning { kDefault, kWalkIndexes };

// One SQL text with its parameter types and its saved plan. Declare as a function-local static:
// it is prepared on first use and kept for the life of the backend. PostgreSQL's plan cache
// re-plans it by itself when a table it uses is dropped and recreated.
class Statement {
  public:
    // cursor_options: CURSOR_OPT_GENERIC_PLAN for a statement whose custom plans would cost more
    // to make than they save (PostgreSQL would otherwise re-plan it on every call).
    //
    // planning: a cached plan is made again at the first execution after an invalidation (an
    // ANALYZE, a TRUNCATE), with whatever the statistics say then: a nearly empty table, or a
    // sample in which many jobs were running, makes a sequential scan (with a sort, or stopping
    // at the first match) look cheapest, and that plan stays while the table grows, reading all
    // of it, dead rows included, on every call. kWalkIndexes plans without sequential and bitmap
    // scans (and without JIT, which such prices would otherwise invite), so what is left is the
    // index walk the statement was written for.
    Statement(const char* sql, std::initializer_list<Oid> types, int cursor_options = 0,
              Planning planning = Planning::kDefault);
    Statement(const char* sql, std::initializer_list<Oid> types, Planning planning)
        : Statement(sql, types, 0, planning) {}
    SPIPlanPtr plan();
    int nargs() const { return nargs_; }
    Planning planning() const { return planning_; }

  private:
    const char* sql_;
    std::array<Oid, kMaxArgs> types_{};
    int nargs_;
    int cursor_options_;
    Planning planning_;
    SPIPlanPtr plan_ = nullptr;
};

// A bound parameter value.
struct Arg {
    Datum value;
    bool isnull;
};
inline Arg null_arg() {
    return {(Datum)0, true};
}
inline Arg arg(int64_t v) {
    return {Int64GetDatum(v), false};
}
inline Arg arg_int4(int32_t v) {
    return {Int32GetDatum(v), false};
}
inline Arg arg_bool(bool v) {
    return {BoolGetDatum(v), false};
}
inline Arg arg_datum(Datum d, bool isnull = false) {
    return {d, isnull};
}
Arg arg_text(std::string_view s);
inline Arg arg_text(const std::string& s) {
    return arg_text(std::string_view(s));
}
inline Arg arg_text(const char* s) {
    return arg_text(std::string_view(s));
}
Arg arg_text(const std::optional<std::string>& s);
// A bigint[] of the ids (in the current memory context).
Arg arg_int8_array(const std::vector<int64_t>& ids);
// A text[] of the strings, std::nullopt a NULL element (in the current memory context).
Arg arg_text_array(const std::vector<std::optional<std::string>>& strings);

// The rows of the last statement run; valid until the Connection finishes.
class Result {
  public:
    Result(SPITupleTable* table, uint64_t rows) : table_(table), rows_(rows) {}
    uint64_t rows() const { return rows_; }
    bool empty() const { return rows_ == 0; }
    TupleDesc desc() const { return table_->tupdesc; }
    HeapTuple tuple(uint64_t row) const { return table_->vals[row]; }
    // Columns are 1-based, like SPI.
    Datum datum(uint64_t row, int col, bool* isnull) const;
    bool is_null(uint64_t row, int col) const;
    int64_t get_int64(uint64_t row, int col) const;
    int32_t get_int32(uint64_t row, int col) const;
    int16_t get_int16(uint64_t row, int col) const;
    TimestampTz get_timestamptz(uint64_t row, int col) const;
    bool get_bool(uint64_t row, int col) const;
    std::string get_text(uint64_t row, int col) const;

  private:
    Datum value_or_zero(uint64_t row, int col) const;

    SPITupleTable* table_;
    uint64_t rows_;
};

// One snapshot for several statements, each of which would otherwise take its own (READ
// COMMITTED): statements whose answers must agree, as one statement's parts do. Taken when made;
// each statement run on it still sees what this transaction wrote before it, as on a snapshot of
// its own. Released by release(), or by the transaction's abort on the error path.
class SharedSnapshot {
  public:
    SharedSnapshot();
    // Nothing: UnregisterSnapshot may raise an error, which must not leave a destructor. Call
    // release() when done; on an error path the transaction's abort lets the snapshot go.
    ~SharedSnapshot() = default;
    SharedSnapshot(const SharedSnapshot&) = delete;
    SharedSnapshot& operator=(const SharedSnapshot&) = delete;
    Snapshot get() const { return snapshot_; }
    // Unregisters the snapshot, under the guard.
    void release();

  private:
    Snapshot snapshot_;
    ResourceOwner owner_;
    bool released_ = false;
};

// SPI_connect / SPI_finish. On the error path (a C++ exception unwinding) SPI_finish is skipped:
// the transaction abort that follows cleans SPI up, and SPI state is not trustworthy by then.
class Connection {
  public:
    Connection();
    ~Connection();
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;

    // Runs a saved statement. limit 0 = all rows.
    Result exec(Statement& st, std::initializer_list<Arg> args, long limit = 0);
    // Runs a saved statement that only reads, under a snapshot taken now instead of the
    // transaction's: under REPEATABLE READ or SERIALIZABLE, a look at what committed after the
    // transaction's snapshot, which exec() cannot see. PostgreSQL's foreign key checks look so.
    Result exec_latest(Statement& st, std::initializer_list<Arg> args, long limit = 0);
    // exec() on `snapshot` rather than a snapshot of its own.
    Result exec(Statement& st, const SharedSnapshot& snapshot, std::initializer_list<Arg> args,
                long limit = 0);
    // Finishes early so results can be handed to the caller's memory context.
    void finish();
    // The memory context that was current before SPI_connect (results to the caller go there).
    MemoryContext caller_context() const { return caller_context_; }

  private:
    Result run(Statement& st, Snapshot snapshot, bool latest, std::initializer_list<Arg> args,
               long limit);

    MemoryContext caller_context_;
    bool finished_ = false;
};

}  // namespace hopper::spi
