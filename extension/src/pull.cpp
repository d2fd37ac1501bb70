// Workers: queue_pull claims jobs under a lease with a fresh fencing token.
#include <string>

#include "hopper/args.hpp"
#include "hopper/claim_commit.hpp"
#include "hopper/guc.hpp"
#include "hopper/limits.hpp"
#include "hopper/reaper.hpp"
#include "hopper/rescue.hpp"
#include "hopper/result.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "access/xact.h"
#include "utils/timestamp.h"
}

using namespace hopper;

namespace {

// Claims up to $3 available jobs whose time has come, in order (priority, run_at, id). SKIP LOCKED
// lets concurrent pullers pass each other instead of queueing on the same rows. A queue with
// limits claims nothing here and answers one row of NULLs instead: its claims go through
// limits::claim_statement(). Saying so here spares unlimited queues a lookup of their own.
// The plan is made once: a generic plan prices "LIMIT $3" as a tenth of the table, so the plan
// cache judged it dearer than a custom one and planned every pull anew (two thirds of a pull's
// CPU), though both plans walk jobs_pull_idx the same way.
spi::Statement& claim_statement() {
    static spi::Statement st(
        "WITH q AS (SELECT lease, limited FROM hopper.queues WHERE name = $1 AND NOT paused), "
        "candidates AS MATERIALIZED ("
        "  SELECT id FROM hopper.jobs "
        "  WHERE queue = $1 AND state = 'available' AND run_at <= $2 "
        "    AND ($5::text[] IS NULL OR kind = ANY ($5)) "
        "    AND EXISTS (SELECT 1 FROM q WHERE NOT limited) "
        "  ORDER BY priority, run_at, id LIMIT $3 FOR UPDATE SKIP LOCKED), "
        "claimed AS ("
        "  UPDATE hopper.jobs j SET state = 'running', attempt = j.attempt + 1, "
        "    lease_token = pg_catalog.nextval('hopper.lease_token_seq'), "
        "    lease_until = $2 + COALESCE($4, (SELECT lease FROM q)), started_at = $2, worker = $6, "
        "    claimed_pid = $7, claimed_backend_start = $8, session_bound = $9 "
        "  FROM candidates c WHERE j.id = c.id "
        "  RETURNING j.id, j.queue, j.kind, j.payload, j.attempt, j.lease_token, j.lease_until, "
        "    j.run_at, j.created_at, j.priority) "
        "SELECT NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::integer, NULL::bigint, "
        "  NULL::timestamptz, NULL::timestamptz, NULL::timestamptz FROM q WHERE limited "
        "UNION ALL "
        "(SELECT id, queue, kind, payload, attempt, lease_token, lease_until, run_at, created_at "
        " FROM claimed ORDER BY priority, run_at, id)",
        HOPPER_CLAIM_PARAM_TYPES, CURSOR_OPT_GENERIC_PLAN);
    return st;
}

}  // namespace

HOPPER_FUNCTION(hopper_queue_pull) {
    std::string queue = args::queue_name(fcinfo, 0);
    if (args::is_null(fcinfo, 1))
        throw PgError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "n must not be NULL");
    int32_t n = PG_GETARG_INT32(1);
    if (n <= 0)
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                      "n must be at least 1, got " + std::to_string(n));
    if (n > guc::max_pull)
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                      "n = " + std::to_string(n) + " is above the pull cap of " +
                          std::to_string(guc::max_pull) + " (hopper.max_pull)",
                      {}, "Pull in several calls, or raise hopper.max_pull.");
    args::interval_us(fcinfo, 2, "lease", 0, args::kMaxLeaseUs);
    auto worker = args::optional_text(fcinfo, 3, "worker", args::kMaxWorker);
    bool kinds_null = args::is_null(fcinfo, 4);
    TimestampTz at = args::clock(fcinfo, 5, "at");
    bool session_bound = !args::is_null(fcinfo, 6) && PG_GETARG_BOOL(6);

    // Everything this call writes counts as the claim's: a page pruned on the way, say.
    claim_commit::before_claim();
    result::SetResult out(fcinfo);
    spi::Connection conn;
    reaper::ensure_running(conn);
    bool limited = false;
    auto claim = [&](int64_t limit) {
        return conn.exec(
            limited ? limits::claim_statement() : claim_statement(),
            {spi::arg_text(queue), spi::arg_datum(TimestampTzGetDatum(at)), spi::arg(limit),
             spi::arg_datum(PG_GETARG_DATUM(2), args::is_null(fcinfo, 2)),
             spi::arg_datum(kinds_null ? (Datum)0 : PG_GETARG_DATUM(4), kinds_null),
             spi::arg_text(worker), spi::arg_int4(MyProcPid),
             spi::arg_datum(TimestampTzGetDatum(MyStartTimestamp)), spi::arg_bool(session_bound)});
    };

    // Hands the claimed rows to the caller, leaving out the "queue has limits" marker.
    auto add = [&](const spi::Result& r) {
        uint64_t added = 0;
        for (uint64_t i = 0; i < r.rows(); ++i) {
            if (r.is_null(i, 1)) continue;
            out.add_row(r, i);
            ++added;
        }
        return added;
    };

    spi::Result r = claim(n);
    if (!r.empty() && r.is_null(0, 1) && limits::enter(conn, queue)) {
        limited = true;
        r = claim(n);
    }
    uint64_t got = add(r);

    // Short of n: take over expired leases too, so stuck jobs move even when no reaper runs.
    if (got < static_cast<uint64_t>(n)) {
        rescue::Counts c = rescue::expired_leases(conn, queue, at, n - static_cast<int64_t>(got),
                                                  /*backoff=*/false);
        if (c.retried > 0) add(claim(n - static_cast<int64_t>(got)));
    }
    conn.finish();
    claim_commit::after_claim();
    return (Datum)0;
}
