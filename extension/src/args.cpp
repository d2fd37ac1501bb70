// Argument checks shared by all entry points; see include/hopper/args.hpp.
#include <algorithm>
#include <cmath>
#include <string>

#include "hopper/args.hpp"
#include "hopper/guc.hpp"

extern "C" {
#include "utils/builtins.h"
#include "access/xact.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/timestamp.h"
}

namespace hopper::args {
namespace {

[[noreturn]] void invalid(const std::string& message, const std::string& hint = {}) {
    throw PgError(ERRCODE_INVALID_PARAMETER_VALUE, message, {}, hint);
}

[[noreturn]] void null_not_allowed(const char* argname) {
    throw PgError(ERRCODE_NULL_VALUE_NOT_ALLOWED, std::string(argname) + " must not be NULL");
}

std::string text_arg(FunctionCallInfo fcinfo, int n) {
    Datum d = PG_GETARG_DATUM(n);
    char* s = pg_guard([&] { return TextDatumGetCString(d); });
    std::string out(s);
    pfree(s);
    return out;
}

bool queue_char_ok(char c, bool first) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return true;
    if (first) return false;
    return c == '_' || c == '.' || c == ':' || c == '-';
}

bool well_formed_queue_name(const std::string& q) {
    bool ok = !q.empty() && q.size() <= static_cast<size_t>(kMaxQueueName);
    for (size_t i = 0; ok && i < q.size(); ++i) ok = queue_char_ok(q[i], i == 0);
    return ok;
}

}  // namespace

bool is_null(FunctionCallInfo fcinfo, int n) {
    return PG_NARGS() <= n || PG_ARGISNULL(n);
}

bool kinds_absent(FunctionCallInfo fcinfo, int n) {
    if (is_null(fcinfo, n)) return true;
    Datum d = PG_GETARG_DATUM(n);
    int ndim = pg_guard([&] { return ARR_NDIM(DatumGetArrayTypeP(d)); });
    if (ndim > 1)
        throw PgError(ERRCODE_ARRAY_SUBSCRIPT_ERROR, "kinds must be a one-dimensional array");
    return false;
}

std::string clip(const std::string& s, size_t max_bytes) {
    if (s.size() <= max_bytes) return s;
    int len = pg_guard([&] {
        return pg_mbcliplen(s.data(), static_cast<int>(s.size()), static_cast<int>(max_bytes));
    });
    return s.substr(0, static_cast<size_t>(len));
}

bool is_queue_name(const std::string& q) {
    return well_formed_queue_name(q) && q != "done";
}

void check_queue_name(const std::string& q, const char* argname) {
    if (!well_formed_queue_name(q))
        invalid(std::string("invalid ") + argname + " name \"" + clip(q, 100) + "\"",
                "A queue name is 1 to 48 characters from A-Z a-z 0-9 _ . : - and starts with a "
                "letter or digit.");
    if (q == "done")
        invalid(std::string(argname) + " name \"done\" is reserved",
                "Its channel, hopper:done, carries the notifications of finished jobs.");
}

std::string queue_name(FunctionCallInfo fcinfo, int n, const char* argname) {
    if (is_null(fcinfo, n)) null_not_allowed(argname);
    std::string q = text_arg(fcinfo, n);
    check_queue_name(q, argname);
    return q;
}

namespace {

std::string bounded_text(FunctionCallInfo fcinfo, int n, const char* argname, int max_len,
                         const char* when_empty) {
    std::string s = text_arg(fcinfo, n);
    if (s.empty()) invalid(std::string(argname) + when_empty);
    if (s.size() > static_cast<size_t>(max_len))
        invalid(std::string(argname) + " is " + std::to_string(s.size()) +
                " bytes long; the limit is " + std::to_string(max_len));
    return s;
}

}  // namespace

std::optional<std::string> optional_text(FunctionCallInfo fcinfo, int n, const char* argname,
                                         int max_len) {
    if (is_null(fcinfo, n)) return std::nullopt;
    return bounded_text(fcinfo, n, argname, max_len, " must not be empty (pass NULL for none)");
}

std::string required_text(FunctionCallInfo fcinfo, int n, const char* argname, int max_len) {
    if (is_null(fcinfo, n)) null_not_allowed(argname);
    return bounded_text(fcinfo, n, argname, max_len, " must not be empty");
}

std::optional<std::string> error_text(FunctionCallInfo fcinfo, int n) {
    if (is_null(fcinfo, n)) return std::nullopt;
    std::string s = text_arg(fcinfo, n);
    if (s.size() <= kMaxErrorBytes) return s;
    return clip(s, kMaxErrorBytes) + "... [clipped: " + std::to_string(s.size()) + " bytes]";
}

int64_t job_id(FunctionCallInfo fcinfo, int n) {
    if (is_null(fcinfo, n)) null_not_allowed("id");
    return PG_GETARG_INT64(n);
}

int64_t lease_token(FunctionCallInfo fcinfo, int n) {
    if (is_null(fcinfo, n)) null_not_allowed("lease_token");
    return PG_GETARG_INT64(n);
}

void check_payload(Jsonb* jb, const char* argname) {
    if (!JB_ROOT_IS_OBJECT(jb) || JB_ROOT_IS_SCALAR(jb)) {
        const char* got = JB_ROOT_IS_SCALAR(jb) ? "a scalar" : "an array";
        invalid(std::string(argname) + " must be a JSON object, got " + got,
                "Wrap the value in an object, e.g. {\"value\": ...}.");
    }
    check_payload_size(VARSIZE(jb), argname);
}

void check_payload_size(size_t size, const char* argname) {
    if (size > static_cast<size_t>(guc::max_payload_bytes))
        throw PgError(ERRCODE_PROGRAM_LIMIT_EXCEEDED,
                      std::string(argname) + " is " + std::to_string(size) +
                          " bytes; the limit is " + std::to_string(guc::max_payload_bytes) +
                          " (hopper.max_payload_bytes)",
                      {}, "Store large data elsewhere and put a reference to it in the payload.");
}

Datum payload(FunctionCallInfo fcinfo, int n, const char* argname) {
    if (is_null(fcinfo, n)) null_not_allowed(argname);
    Jsonb* jb = pg_guard([&] { return PG_GETARG_JSONB_P(n); });
    check_payload(jb, argname);
    return PointerGetDatum(jb);
}

std::optional<int64_t> interval_us(FunctionCallInfo fcinfo, int n, const char* argname,
                                   int64_t min_us, int64_t max_us, bool allow_zero) {
    if (is_null(fcinfo, n)) return std::nullopt;
    const Interval* iv = PG_GETARG_INTERVAL_P(n);
    bool some_positive = iv->month > 0 || iv->day > 0 || iv->time > 0;
    bool some_negative = iv->month < 0 || iv->day < 0 || iv->time < 0;
    if (some_positive && some_negative)
        invalid(std::string(argname) + " must not mix positive and negative parts",
                "Give months, days and time one sign: '36 hours', not '2 days -12 hours'.");
    // Months count as 30 days, as PostgreSQL's own interval comparison does.
    long double us = static_cast<long double>(iv->time) +
                     static_cast<long double>(iv->day) * USECS_PER_DAY +
                     static_cast<long double>(iv->month) * DAYS_PER_MONTH * USECS_PER_DAY;
    bool ok = (allow_zero ? us >= min_us : us > min_us) && us <= max_us;
    if (!ok) {
        std::string range = std::string(allow_zero ? "at least " : "more than ") +
                            std::to_string(min_us / 1000000) + " s and at most " +
                            std::to_string(max_us / 1000000) + " s";
        invalid(std::string(argname) + " must be " + range);
    }
    return static_cast<int64_t>(us);
}

std::optional<Duration> duration(FunctionCallInfo fcinfo, int n, const char* argname,
                                 int64_t min_us, int64_t max_us, bool allow_zero) {
    auto us = interval_us(fcinfo, n, argname, min_us, max_us, allow_zero);
    if (!us) return std::nullopt;
    Duration d;
    d.us = *us;
    d.interval.time = *us;
    d.interval.day = 0;
    d.interval.month = 0;
    return d;
}

int32_t pull_size(FunctionCallInfo fcinfo, int n) {
    if (is_null(fcinfo, n)) throw PgError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "n must not be NULL");
    int32_t size = PG_GETARG_INT32(n);
    if (size <= 0) invalid("n must be at least 1, got " + std::to_string(size));
    if (size > guc::max_pull)
        invalid("n = " + std::to_string(size) + " is above the pull cap of " +
                    std::to_string(guc::max_pull) + " (hopper.max_pull)",
                "Pull in several calls, or raise hopper.max_pull.");
    return size;
}

TimestampTz clock(FunctionCallInfo fcinfo, int n, const char* argname) {
    if (is_null(fcinfo, n)) return GetCurrentTransactionStartTimestamp();
    TimestampTz t = PG_GETARG_TIMESTAMPTZ(n);
    if (TIMESTAMP_NOT_FINITE(t)) invalid(std::string(argname) + " must be a finite timestamp");
    return t;
}

void check_lease_at(TimestampTz at) {
    // A lease from `at` ends before END_TIMESTAMP (294277-01-01), the first instant timestamptz
    // cannot hold: otherwise the lease's end was 22008 "timestamp out of range", which names
    // nothing the caller gave.
    if (at > kLastLeaseStart && pg_guard([] { return superuser(); }))
        invalid("at must be before 294276-12-31 00:00:00+00",
                "A lease of up to a day from it must end within timestamptz's range.");
}

TimestampTz lease_clock(TimestampTz at) {
    TimestampTz now = GetCurrentTimestamp();
    // The default `at`, the transaction's start, is no start for a lease: a pull in a transaction
    // older than its lease handed out a lease already run out, which the next pull took over.
    if (at == GetCurrentTransactionStartTimestamp()) return now;
    if (at <= now) return at;  // every claim but one dated ahead: no role lookup
    if (!pg_guard([] { return superuser(); })) return now;
    // queue_pull refused such an `at` (check_lease_at); a take's rescue of expired leases, which
    // makes none, compares with it, and every lease ends before this.
    return std::min(at, kLastLeaseStart);
}

std::optional<TimestampTz> run_at(FunctionCallInfo fcinfo, int n) {
    if (is_null(fcinfo, n)) return std::nullopt;
    TimestampTz t = PG_GETARG_TIMESTAMPTZ(n);
    if (TIMESTAMP_NOT_FINITE(t)) invalid("run_at must be a finite timestamp");
    TimestampTz now = GetCurrentTransactionStartTimestamp();
    if (t > now + kMaxRunAtAheadUs) invalid("run_at is more than 10 years in the future");
    if (t < now - kMaxRunAtBehindUs) invalid("run_at is more than 1 year in the past");
    return t;
}

int16_t priority(FunctionCallInfo fcinfo, int n) {
    if (is_null(fcinfo, n)) return 0;
    int32_t p = PG_GETARG_INT32(n);
    if (p < PG_INT16_MIN || p > PG_INT16_MAX)
        throw PgError(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
                      "priority " + std::to_string(p) + " is out of range", {},
                      "priority is a smallint: -32768 to 32767, smaller runs first.");
    return static_cast<int16_t>(p);
}

std::optional<int32_t> max_attempts(FunctionCallInfo fcinfo, int n) {
    if (is_null(fcinfo, n)) return std::nullopt;
    int32_t m = PG_GETARG_INT32(n);
    if (m < 1 || m > 1000)
        invalid("max_attempts must be between 1 and 1000, got " + std::to_string(m));
    return m;
}

}  // namespace hopper::args
