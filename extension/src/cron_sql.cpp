// Cron expressions on timestamptz, and hopper.cron_next(), the preview of a schedule.
#include "hopper/args.hpp"
#include "hopper/schedule.hpp"

extern "C" {
#include "access/xact.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
}

namespace hopper::schedule {
namespace {

constexpr int64_t kUnixEpochInPg = int64_t(946684800);  // 2000-01-01 in seconds since 1970

int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

}  // namespace

cron::Schedule parse(const std::string& expression) {
    try {
        return cron::parse(expression);
    } catch (const cron::ParseError& e) {
        throw PgError(
            ERRCODE_INVALID_PARAMETER_VALUE,
            "invalid cron expression \"" + args::clip(expression, 200) + "\": " + e.what(), {},
            "Five fields in UTC: minute hour day-of-month month day-of-week, e.g. "
            "\"*/15 * * * *\", or a macro such as @daily.");
    }
}

TimestampTz next_after(const cron::Schedule& s, const std::string& expression, TimestampTz after) {
    auto next = cron::next_after(s, floor_div(after, USECS_PER_SEC) + kUnixEpochInPg);
    if (!next)
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                      "cron expression \"" + args::clip(expression, 200) +
                          "\" matches no time in the " + std::to_string(cron::kSearchYears) +
                          " years after the given time");
    int64_t secs = *next - kUnixEpochInPg;
    TimestampTz t = secs * USECS_PER_SEC;
    if (secs > END_TIMESTAMP / USECS_PER_SEC || !IS_VALID_TIMESTAMP(t))
        throw PgError(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE, "the next run of cron expression \"" +
                                                               args::clip(expression, 200) +
                                                               "\" is out of the timestamp range");
    return t;
}

}  // namespace hopper::schedule

using namespace hopper;

HOPPER_FUNCTION(hopper_cron_next) {
    if (args::is_null(fcinfo, 0))
        throw PgError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "expression must not be NULL");
    if (args::is_null(fcinfo, 1))
        throw PgError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "after must not be NULL");
    Datum d = PG_GETARG_DATUM(0);
    char* s = pg_guard([&] { return TextDatumGetCString(d); });
    std::string expression(s);
    pfree(s);
    TimestampTz after = args::clock(fcinfo, 1, "after");
    cron::Schedule sched = schedule::parse(expression);
    PG_RETURN_TIMESTAMPTZ(schedule::next_after(sched, expression, after));
}
