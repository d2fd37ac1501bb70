// See include/hopper/rescue.hpp.
#include "hopper/args.hpp"
#include "hopper/claim_hint.hpp"
#include "hopper/notify.hpp"
#include "hopper/rescue.hpp"
#include "hopper/sql.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/timestamp.h"
}

namespace hopper::rescue {

Counts expired_leases(spi::Connection& conn, const std::string& queue, TimestampTz at,
                      int64_t limit, bool backoff) {
    // A cheap probe first: on the hot path there is usually nothing to rescue. Every pull that
    // comes back short asks it, so its plan (jobs_lease_idx on both columns) is made once.
    static spi::Statement probe(
        "SELECT 1 FROM hopper.jobs WHERE queue = $1 AND state OPERATOR(pg_catalog.=) 'running' "
        "  AND lease_until < $2 "
        "LIMIT 1",
        {TEXTOID, TIMESTAMPTZOID}, CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
    if (conn.exec(probe, {spi::arg_text(queue), spi::arg_datum(TimestampTzGetDatum(at))}).empty())
        return {};

    // One statement: lock the expired jobs (skipping any another session is rescuing), move the
    // exhausted ones to history as dead, put the others back.
    static spi::Statement st(
        "WITH expired AS MATERIALIZED ("
        "  SELECT id FROM hopper.jobs WHERE queue = $1 AND state OPERATOR(pg_catalog.=) 'running' AND lease_until < $2 "
        "  ORDER BY lease_until LIMIT $3 FOR UPDATE SKIP LOCKED), "
        "q AS (SELECT * FROM hopper.queues WHERE name = $1), "
        "gone AS ("
        "  DELETE FROM hopper.jobs j USING expired e WHERE j.id = e.id AND j.attempt >= j.max_attempts "
        "  RETURNING j.*), "
        "kept AS (" HOPPER_HISTORY_INSERT HOPPER_HISTORY_SELECT("g")
        "  g.progress, 'lease expired (worker ' || COALESCE(g.worker, 'unknown') || ')', "
        HOPPER_ERRORS_APPEND("g", "'lease expired (worker ' || COALESCE(g.worker, 'unknown') || ')'", "$2")
        ", g.progress_detail, g.payload, 'dead', " HOPPER_FINISHED_AT("g", "$2") ", NULL FROM gone g "
        "  WHERE " HOPPER_QUEUE_KEEPS_HISTORY("g") "), "
        "dead AS (SELECT g.id, " HOPPER_QUEUE_NOTIFIES_DONE("g") " AS notify_done FROM gone g), "
        "back AS ("
        "  UPDATE hopper.jobs j SET state = 'available', "
        "    run_at = CASE WHEN $4 THEN $2 + (SELECT " HOPPER_BACKOFF("j", "q") " FROM q) ELSE $2 END, "
        "    lease_token = NULL, lease_until = NULL, claimed_pid = NULL, claimed_backend_start = NULL, "
        "    session_bound = false, "
        "    last_error = 'lease expired (worker ' || COALESCE(j.worker, 'unknown') || ')', "
        "    errors = " HOPPER_ERRORS_APPEND("j", "'lease expired (worker ' || COALESCE(j.worker, 'unknown') || ')'", "$2")
        "  FROM expired e WHERE j.id = e.id AND j.attempt < j.max_attempts RETURNING j.id) "
        "SELECT (SELECT pg_catalog.count(*) FROM back), d.id, d.notify_done, "
        "  COALESCE((SELECT limited FROM q), false) "
        "FROM (SELECT NULL::bigint AS id) z "
        "LEFT JOIN dead d ON true",
        {TEXTOID, TIMESTAMPTZOID, INT8OID, BOOLOID}, spi::Planning::kWalkIndexes);
    spi::Result r = conn.exec(st, {spi::arg_text(queue), spi::arg_datum(TimestampTzGetDatum(at)),
                                   spi::arg(limit), spi::arg_bool(backoff)});
    Counts c;
    // Jobs put back keep their ids but get run_at = at, which may lie below the claim hint.
    if (r.rows() > 0 && r.get_int64(0, 1) > 0) claim_hint::clear_at_end(queue);
    // The rescued jobs' slots are free: a pull waiting on a limited queue may take them.
    bool limited = r.rows() > 0 && r.get_bool(0, 4);
    if (limited && (r.get_int64(0, 1) > 0 || !r.is_null(0, 2))) notify::slot_freed(queue);
    for (uint64_t i = 0; i < r.rows(); ++i) {
        c.retried = static_cast<uint64_t>(r.get_int64(i, 1));
        if (!r.is_null(i, 2)) {
            ++c.dead;
            notify::job_done(r.get_int64(i, 2), queue, "dead", r.get_bool(i, 3));
        }
    }
    return c;
}

Counts for_short_claim(spi::Connection& conn, const std::string& queue, TimestampTz at,
                       int64_t wanted, uint64_t claimed) {
    if (claimed >= static_cast<uint64_t>(wanted)) return {};
    int64_t missing = wanted - static_cast<int64_t>(claimed);
    return expired_leases(conn, queue, args::lease_clock(at), missing, /*backoff=*/false);
}

Counts orphaned_sessions(spi::Connection& conn, TimestampTz at, int64_t limit) {
#define HOPPER_GONE_ERROR(alias) \
    "'worker backend gone (pid ' || " alias ".claimed_pid::pg_catalog.text || ')'"
    // The live set is read after the statement's snapshot is taken, so a claimer whose claim we
    // see and who is missing from it has really exited. (A backend whose start time this role may
    // not see counts as alive: better late than a job taken from a live worker.) Candidates are
    // then locked together with the token seen: a job re-claimed meanwhile by a newer backend has
    // another token and is left.
    static spi::Statement st(
        "WITH live AS MATERIALIZED ("
        "  SELECT a.pid, a.backend_start FROM pg_catalog.pg_stat_get_activity(NULL::integer) a "
        "  WHERE a.pid IS NOT NULL), "
        "candidates AS MATERIALIZED ("
        "  SELECT j.id, j.lease_token FROM hopper.jobs j "
        "  WHERE j.state OPERATOR(pg_catalog.=) 'running' AND j.lease_until IS NOT NULL AND j.session_bound AND NOT EXISTS ("
        "    SELECT 1 FROM live l WHERE l.pid = j.claimed_pid "
        "      AND (l.backend_start = j.claimed_backend_start OR l.backend_start IS NULL)) "
        "  ORDER BY j.id LIMIT $2), "
        "orphans AS MATERIALIZED ("
        "  SELECT j.id FROM hopper.jobs j JOIN candidates c "
        "    ON c.id = j.id AND c.lease_token = j.lease_token "
        "  WHERE j.state OPERATOR(pg_catalog.=) 'running' FOR UPDATE OF j SKIP LOCKED), "
        "gone AS ("
        "  DELETE FROM hopper.jobs j USING orphans o WHERE j.id = o.id AND j.attempt >= j.max_attempts "
        "  RETURNING j.*), "
        "kept AS (" HOPPER_HISTORY_INSERT HOPPER_HISTORY_SELECT("g")
        "  g.progress, " HOPPER_GONE_ERROR("g") ", "
        HOPPER_ERRORS_APPEND("g", HOPPER_GONE_ERROR("g"), "$1")
        ", g.progress_detail, g.payload, 'dead', " HOPPER_FINISHED_AT("g", "$1") ", NULL FROM gone g "
        "  WHERE " HOPPER_QUEUE_KEEPS_HISTORY("g") "), "
        "dead AS (SELECT g.id, g.queue, " HOPPER_QUEUE_NOTIFIES_DONE("g") " AS notify_done, "
        HOPPER_QUEUE_LIMITED("g") " AS limited FROM gone g), "
        "back AS ("
        "  UPDATE hopper.jobs j SET state = 'available', run_at = $1, "
        "    lease_token = NULL, lease_until = NULL, claimed_pid = NULL, claimed_backend_start = NULL, "
        "    session_bound = false, last_error = " HOPPER_GONE_ERROR("j") ", "
        "    errors = " HOPPER_ERRORS_APPEND("j", HOPPER_GONE_ERROR("j"), "$1")
        "  FROM orphans o WHERE j.id = o.id AND j.attempt < j.max_attempts RETURNING j.queue) "
        "SELECT 'back'::text, b.queue, pg_catalog.count(*)::bigint, false, false FROM back b "
        "GROUP BY b.queue "
        "UNION ALL SELECT 'dead'::text, d.queue, d.id, d.notify_done, d.limited FROM dead d",
        {TIMESTAMPTZOID, INT8OID}, spi::Planning::kWalkIndexes);
#undef HOPPER_GONE_ERROR
    spi::Result r = conn.exec(st, {spi::arg_datum(TimestampTzGetDatum(at)), spi::arg(limit)});
    Counts c;
    for (uint64_t i = 0; i < r.rows(); ++i) {
        std::string what = r.get_text(i, 1);
        std::string queue = r.get_text(i, 2);
        if (what == "back") {
            c.retried += static_cast<uint64_t>(r.get_int64(i, 3));
            claim_hint::clear_at_end(queue);
            notify::queue_ready(queue);
        } else {
            ++c.dead;
            notify::job_done(r.get_int64(i, 3), queue, "dead", r.get_bool(i, 4));
            if (r.get_bool(i, 5)) notify::slot_freed(queue);
        }
    }
    return c;
}

}  // namespace hopper::rescue
