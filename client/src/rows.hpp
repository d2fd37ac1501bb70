// Converting between the client's C++ types and the text the queue functions take and return.
// Times cross the wire as microseconds since the Unix epoch, so neither DateStyle nor TimeZone of
// the session can change how they are read.
//
// Every operator below is one pg_catalog has for exactly its operands' types (the casts are
// written out): for a pair it lacks (numeric * integer, bigint * interval), an operator created
// in a schema on the caller's search_path would be chosen, and run as the caller.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hopper/connection.hpp"
#include "hopper/types.hpp"

// A timestamptz or interval column as int8 microseconds (NULL stays NULL). A timestamptz reaches
// the year 294276 and infinity, neither of which fits: the epoch is held within int8 as a numeric
// before the cast, so such a row reads as the clock's end (rows::time_at) instead of failing the
// whole query. CASE, not LEAST/GREATEST alone: those skip NULLs and would turn one into a bound.
#define HOPPER_US(col)                                                           \
    "(CASE WHEN " col " IS NOT NULL THEN LEAST(GREATEST(EXTRACT(epoch FROM " col \
    ") * 1000000::numeric, "                                                     \
    "-9223372036854775808), 9223372036854775807)::int8 END)"
// A pulled job's lease_until less the server's clock as the row is returned (after the claim,
// however long a waiting pull waited before it), as int8 microseconds: what was left of the lease,
// by the server's clock alone. The worker times its heartbeats by it, since comparing lease_until
// with its own clock would be off by however far that clock is from the server's.
#define HOPPER_LEASE_LEFT(col) \
    "(EXTRACT(epoch FROM " col " - pg_catalog.clock_timestamp()) * 1000000::numeric)::int8"
// int8 microseconds parameters back into timestamptz / interval.
// A time is built from whole hours and the microseconds left over: each product is exact in the
// float8 that interval multiplication computes in (to_timestamp's float8 seconds were 1-2 us off
// from about 2070 on; microseconds alone would be past 2255), and an interval of hours, unlike
// one of days, is the same length in every TimeZone.
#define HOPPER_TS_PARAM(p)                              \
    "('epoch'::pg_catalog.timestamptz + ((" p           \
    "::int8 / 3600000000)::float8 * interval '1 hour' " \
    "+ (" p "::int8 % 3600000000)::float8 * interval '1 microsecond'))"
#define HOPPER_INTERVAL_PARAM(p) "(" p "::int8::float8 * interval '1 microsecond')"

// The columns of hopper.job_info, in the order read_job_info expects.
#define HOPPER_JOB_INFO_COLUMNS \
    "id, queue, kind, state, attempt, max_attempts, priority, " HOPPER_US("run_at") ", "        \
    HOPPER_US("created_at") ", " HOPPER_US("started_at") ", " HOPPER_US("finished_at") ", "     \
    "worker, last_error, errors, result, progress, progress_detail, payload"

namespace hopper::rows {

Param micros(std::optional<Duration> d);
Param micros(std::optional<TimePoint> t);
// A double for a real ($n::real) parameter: one too small for a real (1e-50) as 0, which is what
// the server would store, one too large (1e50) as infinity, which the server's range check
// refuses with its own message; either was refused as "out of range for type real" (22003).
Param real(double v);
TimePoint time_at(const Result& r, int row, int col);
std::optional<TimePoint> opt_time_at(const Result& r, int row, int col);

// A PostgreSQL array literal ({"a","b",NULL}) of text values, for text[] and jsonb[] parameters,
// the values read in `encoding` (the session's client_encoding, Connection::client_encoding()):
// only a character of one byte is escaped, a backslash inside a wider one (SJIS, BIG5, GBK,
// GB18030, UHC, JOHAB) kept as it is.
std::string array_literal(const std::vector<std::optional<std::string>>& values, int encoding);
// The kinds filter of a pull or take as a text[] parameter: NULL (any kind) when empty.
Param kinds_param(const std::vector<std::string>& kinds, int encoding);

// A pulled job: the columns of hopper.leased_job, then HOPPER_LEASE_LEFT.
Job read_job(const Result& r, int row);
// A hopper.taken_job row: id, queue, kind, payload, attempt, run_at, created_at (no lease).
Job read_taken_job(const Result& r, int row);
JobInfo read_job_info(const Result& r, int row);
QueueStat read_queue_stat(const Result& r, int row);

}  // namespace hopper::rows
