// Listing: queue_jobs (the jobs of one queue, optionally in one state, newest first).

#include "hopper/args.hpp"
#include "hopper/queues.hpp"
#include "hopper/result.hpp"

extern "C" {
#include "catalog/pg_type.h"
}

using namespace hopper;

namespace {

constexpr int32_t kMaxListLimit = 10000;
// The states job_status reports; "scheduled" is an available job whose run_at is still ahead.
constexpr const char* kStates[] = {"available", "scheduled", "running",
                                   "completed", "dead",      "cancelled"};

std::optional<std::string> state_arg(FunctionCallInfo fcinfo, int n) {
    auto state = args::optional_text(fcinfo, n, "state", 32);
    if (!state) return state;
    for (const char* s : kStates)
        if (*state == s) return state;
    throw PgError(ERRCODE_INVALID_PARAMETER_VALUE, "invalid state \"" + *state + "\"", {},
                  "state is one of available, scheduled, running, completed, dead, cancelled, "
                  "or NULL for all.");
}

int32_t limit_arg(FunctionCallInfo fcinfo, int n) {
    if (args::is_null(fcinfo, n))
        throw PgError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "lim must not be NULL");
    int32_t lim = PG_GETARG_INT32(n);
    if (lim < 1 || lim > kMaxListLimit)
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE, "lim must be between 1 and " +
                                                           std::to_string(kMaxListLimit) +
                                                           ", got " + std::to_string(lim));
    return lim;
}

}  // namespace

HOPPER_FUNCTION(hopper_queue_jobs) {
    std::string queue = args::queue_name(fcinfo, 0);
    std::optional<std::string> state = state_arg(fcinfo, 1);
    int32_t lim = limit_arg(fcinfo, 2);
    // Columns in hopper.job_info order, computed as job_status computes them: the waiting jobs of
    // packed rows as the freshly pushed jobs they stand for.
    static spi::Statement st(
        "SELECT * FROM ("
        "  SELECT id, queue, kind, "
        "    CASE WHEN state = 'available' AND run_at > pg_catalog.now() THEN 'scheduled' "
        "         ELSE state::text END AS state, "
        "    attempt, max_attempts, priority, run_at, created_at, started_at, "
        "    NULL::timestamptz AS finished_at, worker, last_error, errors, NULL::jsonb AS result, "
        "    progress, progress_detail, payload "
        "  FROM hopper.jobs WHERE queue = $1 "
        "  UNION ALL "
        "  SELECT id, queue, kind, state::text, attempt, max_attempts, priority, run_at, "
        "    created_at, started_at, finished_at, worker, last_error, errors, result, progress, "
        "    progress_detail, payload "
        "  FROM hopper.job_history WHERE queue = $1 "
        "  UNION ALL "
        "  SELECT u.id, b.queue, b.kind, "
        "    CASE WHEN b.run_at > pg_catalog.now() THEN 'scheduled' ELSE 'available' END, "
        "    0, b.max_attempts, b.priority, b.run_at, b.created_at, NULL::timestamptz, "
        "    NULL::timestamptz, NULL::text, NULL::text, NULL::jsonb, NULL::jsonb, NULL::real, "
        "    NULL::jsonb, u.payload "
        "  FROM hopper.job_batches b, ROWS FROM (pg_catalog.unnest(b.ids[b.taken + 1 :]), "
        "    pg_catalog.unnest(b.payloads[b.taken + 1 :])) u(id, payload) "
        "  WHERE b.queue = $1) j "
        "WHERE $2::text IS NULL OR j.state = $2 "
        "ORDER BY j.id DESC LIMIT $3",
        {TEXTOID, TEXTOID, INT4OID});
    result::SetResult out(fcinfo);
    spi::Connection conn;
    queues::require(conn, queue);
    spi::Result r = conn.exec(st, {spi::arg_text(queue), spi::arg_text(state), spi::arg_int4(lim)});
    for (uint64_t i = 0; i < r.rows(); ++i) out.add_row(r, i);
    conn.finish();
    return (Datum)0;
}
