// See include/hopper/rescue.hpp.
#include "hopper/notify.hpp"
#include "hopper/rescue.hpp"
#include "hopper/sql.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/timestamp.h"
}

namespace hopper::rescue {

Counts expired_leases(spi::Connection& conn, const std::string& queue, TimestampTz at, int64_t limit,
                      bool backoff) {
    // A cheap probe first: on the hot path there is usually nothing to rescue.
    static spi::Statement probe(
        "SELECT 1 FROM hopper.jobs WHERE queue = $1 AND state = 'running' AND lease_until < $2 LIMIT 1",
        {TEXTOID, TIMESTAMPTZOID});
    if (conn.exec(probe, {spi::arg_text(queue), spi::arg_datum(TimestampTzGetDatum(at))}).empty())
        return {};

    // One statement: lock the expired jobs (skipping any another session is rescuing), move the
    // exhausted ones to history as dead, put the others back.
    static spi::Statement st(
        "WITH expired AS MATERIALIZED ("
        "  SELECT id FROM hopper.jobs WHERE queue = $1 AND state = 'running' AND lease_until < $2 "
        "  ORDER BY lease_until LIMIT $3 FOR UPDATE SKIP LOCKED), "
        "q AS (SELECT * FROM hopper.queues WHERE name = $1), "
        "gone AS ("
        "  DELETE FROM hopper.jobs j USING expired e WHERE j.id = e.id AND j.attempt >= j.max_attempts "
        "  RETURNING j.*), "
        "dead AS (" HOPPER_HISTORY_INSERT HOPPER_HISTORY_SELECT("g")
        "  g.progress, 'lease expired (worker ' || COALESCE(g.worker, 'unknown') || ')', "
        HOPPER_ERRORS_APPEND("g", "'lease expired (worker ' || COALESCE(g.worker, 'unknown') || ')'", "$2")
        ", g.progress_detail, g.payload, 'dead', $2, NULL FROM gone g RETURNING id), "
        "back AS ("
        "  UPDATE hopper.jobs j SET state = 'available', "
        "    run_at = CASE WHEN $4 THEN $2 + (SELECT " HOPPER_BACKOFF("j", "q") " FROM q) ELSE $2 END, "
        "    lease_token = NULL, lease_until = NULL, claimed_pid = NULL, claimed_backend_start = NULL, "
        "    session_bound = false, "
        "    last_error = 'lease expired (worker ' || COALESCE(j.worker, 'unknown') || ')', "
        "    errors = " HOPPER_ERRORS_APPEND("j", "'lease expired (worker ' || COALESCE(j.worker, 'unknown') || ')'", "$2")
        "  FROM expired e WHERE j.id = e.id AND j.attempt < j.max_attempts RETURNING j.id) "
        "SELECT (SELECT pg_catalog.count(*) FROM back), d.id FROM (SELECT NULL::bigint AS id) z "
        "LEFT JOIN dead d ON true",
        {TEXTOID, TIMESTAMPTZOID, INT8OID, BOOLOID});
    spi::Result r = conn.exec(st, {spi::arg_text(queue), spi::arg_datum(TimestampTzGetDatum(at)),
                                   spi::arg(limit), spi::arg_bool(backoff)});
    Counts c;
    for (uint64_t i = 0; i < r.rows(); ++i) {
        c.retried = static_cast<uint64_t>(r.get_int64(i, 1));
        if (!r.is_null(i, 2)) {
            ++c.dead;
            notify::job_done(r.get_int64(i, 2), queue, "dead");
        }
    }
    return c;
}

}  // namespace hopper::rescue
