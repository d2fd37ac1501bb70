// Workers: heartbeat, progress and release of a job they hold. A stale token is the normal news
// "you lost this job" (false), not an error; an unknown id is P0002.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "hopper/args.hpp"
#include "hopper/claim_hint.hpp"
#include "hopper/jobs.hpp"
#include "hopper/notify.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/timestamp.h"
}

using namespace hopper;

namespace {
// The shortest text that reads back as v: 1.0000001 is not shown as 1, nor -0.1 as -0.100000001.
std::string format_real(float v) {
    if (std::isnan(v)) return "NaN";  // as PostgreSQL writes them
    if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
    char buf[32];
    auto r = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, r.ptr);
}
}  // namespace

HOPPER_FUNCTION(hopper_queue_heartbeat) {
    int64_t id = args::job_id(fcinfo, 0);
    int64_t token = args::lease_token(fcinfo, 1);
    auto extend = args::duration(fcinfo, 2, "extend", 0, args::kMaxLeaseUs);
    // Never earlier than the lease already ends: a job pulled with a lease of an hour lost it
    // 30 s after its first heartbeat (the queue's lease), and was taken over while running. From
    // the time of the call, as a pull's lease is: from the transaction's start, a heartbeat in a
    // transaction older than the lease left it run out, and from the statement's, so did every
    // heartbeat of a procedure that commits as it goes (its CALL is one statement), which
    // answered true while the reaper took the job over.
    static spi::Statement st(
        "UPDATE hopper.jobs j SET lease_until = GREATEST(j.lease_until, $4 + COALESCE($3, "
        "q.lease)) "
        "FROM hopper.queues q WHERE j.id = $1 AND j.lease_token = $2 "
        "  AND j.state OPERATOR(pg_catalog.=) 'running' AND q.name = j.queue "
        "    RETURNING j.id",
        {INT8OID, INT8OID, INTERVALOID, TIMESTAMPTZOID}, spi::Planning::kWalkIndexes);
    spi::Connection conn;
    bool held = !conn.exec(st, {spi::arg(id), spi::arg(token),
                                spi::arg_datum(args::duration_datum(extend), !extend),
                                spi::arg_datum(TimestampTzGetDatum(GetCurrentTimestamp()))})
                     .empty();
    if (!held) jobs::require_known(conn, id);
    conn.finish();
    PG_RETURN_BOOL(held);
}

HOPPER_FUNCTION(hopper_queue_progress) {
    int64_t id = args::job_id(fcinfo, 0);
    int64_t token = args::lease_token(fcinfo, 1);
    if (args::is_null(fcinfo, 2))
        throw PgError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "progress must not be NULL");
    float4 progress = PG_GETARG_FLOAT4(2);
    if (!(progress >= 0.0f && progress <= 1.0f))
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                      "progress must be a fraction between 0 and 1, got " + format_real(progress));
    bool detail_null = args::is_null(fcinfo, 3);
    static spi::Statement st(
        "UPDATE hopper.jobs SET progress = $3, progress_detail = COALESCE($4, progress_detail) "
        "  WHERE id = $1 AND lease_token = $2 AND state OPERATOR(pg_catalog.=) 'running' "
        "    RETURNING id",
        {INT8OID, INT8OID, FLOAT4OID, JSONBOID}, spi::Planning::kWalkIndexes);
    spi::Connection conn;
    bool held =
        !conn.exec(st, {spi::arg(id), spi::arg(token), spi::arg_datum(PG_GETARG_DATUM(2)),
                        spi::arg_datum(detail_null ? (Datum)0 : PG_GETARG_DATUM(3), detail_null)})
             .empty();
    if (!held) jobs::require_known(conn, id);
    conn.finish();
    PG_RETURN_BOOL(held);
}

HOPPER_FUNCTION(hopper_queue_release) {
    int64_t id = args::job_id(fcinfo, 0);
    int64_t token = args::lease_token(fcinfo, 1);
    // Giving a job back costs no attempt: the worker did not fail it, it chose not to run it. So
    // the claim is undone: the job keeps its place in pull order (it was due when claimed; a
    // worker shutting down must not send it behind every job of its priority that fell due since)
    // and shows no start or worker of the attempt that did not happen. Only a job claimed with
    // `at` ahead of the clock, not due yet, is due from now, as before. The claim hint learns of
    // the key however old it is (made_available lowers it at commit).
    static spi::Statement st(
        "UPDATE hopper.jobs SET state = 'available', attempt = attempt - 1, "
        "run_at = LEAST(run_at, pg_catalog.now()), started_at = NULL, worker = NULL, "
        "lease_token = NULL, lease_until = NULL, claimed_pid = NULL, "
        "claimed_backend_start = NULL, session_bound = false WHERE id = $1 AND lease_token = $2 "
        "  AND state OPERATOR(pg_catalog.=) 'running' "
        "    RETURNING queue, priority, "
        "run_at",
        {INT8OID, INT8OID}, spi::Planning::kWalkIndexes);
    spi::Connection conn;
    spi::Result r = conn.exec(st, {spi::arg(id), spi::arg(token)});
    bool released = !r.empty();
    if (released) {
        claim_hint::made_available(r.get_text(0, 1),
                                   {r.get_int16(0, 2), r.get_timestamptz(0, 3), id}, false);
        notify::queue_ready(r.get_text(0, 1));
    } else
        jobs::require_known(conn, id);
    conn.finish();
    PG_RETURN_BOOL(released);
}
