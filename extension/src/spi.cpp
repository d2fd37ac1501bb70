// SPI wrappers: see include/hopper/spi.hpp.
#include <algorithm>
#include <exception>
#include <memory>
#include <optional>

#include "hopper/spi.hpp"

extern "C" {
#include "jit/jit.h"
#include "catalog/pg_type.h"
#include "optimizer/cost.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

namespace hopper::spi {

namespace {

// The settings of Planning::kWalkIndexes for one execution, assigned to the planner's variables
// and put back afterwards. None of them has a check or assign hook, and only a (re)plan reads them,
// so this is what SET LOCAL would do without the GUC stack: a GUC nest level costs a walk over
// every setting at its end, which every hot statement would pay. The destructor also runs when an
// error unwinds through pg_guard.
class WalkIndexPlanning {
  public:
    WalkIndexPlanning()
        : seqscan_(enable_seqscan), bitmapscan_(enable_bitmapscan), jit_(jit_enabled) {
        enable_seqscan = false;
        enable_bitmapscan = false;
        jit_enabled = false;
    }
    ~WalkIndexPlanning() {
        enable_seqscan = seqscan_;
        enable_bitmapscan = bitmapscan_;
        jit_enabled = jit_;
    }
    WalkIndexPlanning(const WalkIndexPlanning&) = delete;
    WalkIndexPlanning& operator=(const WalkIndexPlanning&) = delete;

  private:
    bool seqscan_;
    bool bitmapscan_;
    bool jit_;
};

}  // namespace

Statement::Statement(const char* sql, std::initializer_list<Oid> types, int cursor_options,
                     Planning planning)
    : sql_(sql),
      nargs_(static_cast<int>(types.size())),
      cursor_options_(cursor_options),
      planning_(planning) {
    if (types.size() > kMaxArgs)
        throw PgError(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION, "hopper: too many statement parameters");
    std::copy(types.begin(), types.end(), types_.begin());
}

SPIPlanPtr Statement::plan() {
    if (plan_ != nullptr) return plan_;
    SPIPlanPtr p = pg_guard([&] {
        SPIPlanPtr prepared = SPI_prepare_cursor(sql_, nargs_, types_.data(), cursor_options_);
        if (prepared == nullptr)
            elog(ERROR, "hopper: SPI_prepare failed (%s) for: %s",
                 SPI_result_code_string(SPI_result), sql_);
        if (SPI_keepplan(prepared) != 0) elog(ERROR, "hopper: SPI_keepplan failed");
        return prepared;
    });
    plan_ = p;
    return plan_;
}

Arg arg_text(std::string_view s) {
    Datum d = pg_guard([&] {
        return PointerGetDatum(cstring_to_text_with_len(s.data(), static_cast<int>(s.size())));
    });
    return {d, false};
}

Arg arg_text(const std::optional<std::string>& s) {
    if (!s) return null_arg();
    return arg_text(std::string_view(*s));
}

Arg arg_int8_array(const std::vector<int64_t>& ids) {
    std::vector<Datum> elems;
    elems.reserve(ids.size());
    for (int64_t id : ids) elems.push_back(Int64GetDatum(id));
    Datum d = pg_guard([&] {
        return PointerGetDatum(construct_array(elems.data(), static_cast<int>(elems.size()),
                                               INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
    });
    return {d, false};
}

Arg arg_text_array(const std::vector<std::optional<std::string>>& strings) {
    std::vector<Datum> elems(strings.size());
    // bool[], which std::vector<bool> does not hold; one more so that an empty array has one.
    std::unique_ptr<bool[]> nulls = std::make_unique<bool[]>(strings.size() + 1);
    for (size_t i = 0; i < strings.size(); ++i) {
        nulls[i] = !strings[i].has_value();
        if (strings[i]) elems[i] = arg_text(*strings[i]).value;
    }
    Datum d = pg_guard([&] {
        int dims[1] = {static_cast<int>(strings.size())};
        int lbs[1] = {1};
        return PointerGetDatum(construct_md_array(elems.data(), nulls.get(), 1, dims, lbs, TEXTOID,
                                                  -1, false, TYPALIGN_INT));
    });
    return {d, false};
}

Datum Result::datum(uint64_t row, int col, bool* isnull) const {
    // A read past the rows would follow a wild pointer and take the whole server down with this
    // backend: a bug in the caller ends the statement instead.
    if (row >= rows_ || col < 1 || col > table_->tupdesc->natts)
        throw PgError(ERRCODE_INTERNAL_ERROR, "hopper: result row " + std::to_string(row) +
                                                  " column " + std::to_string(col) +
                                                  " read out of range (" + std::to_string(rows_) +
                                                  " rows)");
    return SPI_getbinval(table_->vals[row], table_->tupdesc, col, isnull);
}

bool Result::is_null(uint64_t row, int col) const {
    bool isnull;
    datum(row, col, &isnull);
    return isnull;
}

// The by-value readers: a NULL reads as the zero Datum, i.e. 0 or false.
Datum Result::value_or_zero(uint64_t row, int col) const {
    bool isnull;
    Datum d = datum(row, col, &isnull);
    return isnull ? (Datum)0 : d;
}

int64_t Result::get_int64(uint64_t row, int col) const {
    return DatumGetInt64(value_or_zero(row, col));
}

int32_t Result::get_int32(uint64_t row, int col) const {
    return DatumGetInt32(value_or_zero(row, col));
}

int16_t Result::get_int16(uint64_t row, int col) const {
    return DatumGetInt16(value_or_zero(row, col));
}

TimestampTz Result::get_timestamptz(uint64_t row, int col) const {
    return DatumGetTimestampTz(value_or_zero(row, col));
}

bool Result::get_bool(uint64_t row, int col) const {
    return DatumGetBool(value_or_zero(row, col));
}

std::string Result::get_text(uint64_t row, int col) const {
    bool isnull;
    Datum d = datum(row, col, &isnull);
    if (isnull) return {};
    char* s = pg_guard([&] { return TextDatumGetCString(d); });
    std::string out(s);
    pfree(s);
    return out;
}

Connection::Connection() : caller_context_(CurrentMemoryContext) {
    pg_guard([] {
        if (SPI_connect() != SPI_OK_CONNECT) elog(ERROR, "hopper: SPI_connect failed");
    });
}

Connection::~Connection() {
    if (finished_ || std::uncaught_exceptions() > 0) return;
    SPI_finish();
}

void Connection::finish() {
    if (finished_) return;
    finished_ = true;
    pg_guard([] { SPI_finish(); });
}

SharedSnapshot::SharedSnapshot() : owner_(CurrentResourceOwner) {
    snapshot_ = pg_guard([] { return RegisterSnapshot(GetTransactionSnapshot()); });
}

void SharedSnapshot::release() {
    if (released_) return;
    released_ = true;
    pg_guard([this] { UnregisterSnapshotFromOwner(snapshot_, owner_); });
}

Result Connection::exec(Statement& st, std::initializer_list<Arg> args, long limit) {
    return run(st, InvalidSnapshot, false, args, limit);
}

Result Connection::exec(Statement& st, const SharedSnapshot& snapshot,
                        std::initializer_list<Arg> args, long limit) {
    return run(st, snapshot.get(), false, args, limit);
}

Result Connection::exec_latest(Statement& st, std::initializer_list<Arg> args, long limit) {
    return run(st, InvalidSnapshot, true, args, limit);
}

Result Connection::run(Statement& st, Snapshot snapshot, bool latest,
                       std::initializer_list<Arg> args, long limit) {
    SPIPlanPtr plan = st.plan();
    if (args.size() != static_cast<size_t>(st.nargs()))
        throw PgError(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION, "hopper: wrong argument count");
    std::array<Datum, kMaxArgs> values{};
    std::array<char, kMaxArgs + 1> nulls{};
    int i = 0;
    for (const Arg& a : args) {
        values[i] = a.value;
        nulls[i] = a.isnull ? 'n' : ' ';
        ++i;
    }
    std::optional<WalkIndexPlanning> walk;
    if (st.planning() == Planning::kWalkIndexes) walk.emplace();
    // The latest snapshot: read-only, SPI runs the statement under exactly that snapshot (a copy
    // of it: GetLatestSnapshot's is overwritten by the next call), and refuses one that writes. A
    // snapshot of the caller's, with read_only false, is used with its command id advanced before
    // the statement, as a statement's own snapshot would be.
    int rc = pg_guard([&] {
        if (latest)
            return SPI_execute_snapshot(plan, values.data(), nulls.data(), GetLatestSnapshot(),
                                        InvalidSnapshot, true, false, limit);
        if (snapshot != InvalidSnapshot)
            return SPI_execute_snapshot(plan, values.data(), nulls.data(), snapshot,
                                        InvalidSnapshot, false, true, limit);
        return SPI_execute_plan(plan, values.data(), nulls.data(), false, limit);
    });
    if (rc < 0)
        throw PgError(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION,
                      std::string("hopper: ") +
                          (latest || snapshot != InvalidSnapshot ? "SPI_execute_snapshot"
                                                                 : "SPI_execute_plan") +
                          " failed: " + SPI_result_code_string(rc));
    return Result(SPI_tuptable, SPI_processed);
}

}  // namespace hopper::spi
