// Workers: queue_fail records an error and retries the job with backoff, or buries it (dead).
#include "hopper/args.hpp"
#include "hopper/failed_attempt.hpp"
#include "hopper/sql.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
}

using namespace hopper;

HOPPER_FUNCTION(hopper_queue_fail) {
    int64_t id = args::job_id(fcinfo, 0);
    int64_t token = args::lease_token(fcinfo, 1);
    constexpr int64_t kMaxRetryIn = int64_t(366) * 86400 * 1000000;
    auto retry_in = args::duration(fcinfo, 3, "retry_in", 0, kMaxRetryIn, /*allow_zero=*/true);
    bool permanent = !args::is_null(fcinfo, 4) && PG_GETARG_BOOL(4);

    spi::Arg error = spi::arg_text(args::error_text(fcinfo, 2));
    spi::Arg retry_in_arg = spi::arg_datum(args::duration_datum(retry_in), !retry_in);

    // Retry: attempts remain and the failure is not permanent. The backoff counts from the
    // failure, read from the clock ($6): a transaction, or a statement (a procedure that commits
    // as it goes, a function that works through many jobs), may have begun longer ago than the
    // backoff. Without one (retry_in => '0') the job is due at once, to this transaction's own
    // claims too, which judge "due" by its start.
    static spi::Statement retry(
        "UPDATE hopper.jobs j SET state = 'available', "
        "  run_at = CASE WHEN $4 OPERATOR(pg_catalog.=) interval '0' THEN pg_catalog.now() "
        "    ELSE $6 + COALESCE($4, " HOPPER_BACKOFF("j", "q") ") END, "
        "  lease_token = NULL, lease_until = NULL, claimed_pid = NULL, claimed_backend_start = NULL, "
        "  session_bound = false, last_error = $3, "
        "  errors = " HOPPER_ERRORS_APPEND("j", "$3", "pg_catalog.now()") " "
        "FROM hopper.queues q WHERE j.id = $1 AND j.lease_token = $2 "
        "  AND j.state OPERATOR(pg_catalog.=) 'running' AND q.name = j.queue "
        "  AND NOT $5 AND j.attempt < j.max_attempts "
        "RETURNING j.run_at > $6, j.queue, j.priority, j.run_at, q.limited",
        {INT8OID, INT8OID, TEXTOID, INTERVALOID, BOOLOID, TIMESTAMPTZOID},
        spi::Planning::kWalkIndexes);
    // Dead: to history, with the error.
    static spi::Statement bury(
        "WITH gone AS (DELETE FROM hopper.jobs WHERE id = $1 AND lease_token = $2 "
        "  AND state OPERATOR(pg_catalog.=) 'running' "
        "    RETURNING *), kept AS (" HOPPER_HISTORY_INSERT HOPPER_HISTORY_SELECT("g")
        "g.progress, $3, " HOPPER_ERRORS_APPEND("g", "$3", "pg_catalog.now()")
        ", g.progress_detail, g.payload, 'dead', " HOPPER_FINISHED_AT("g", "pg_catalog.now()") ", NULL FROM gone g WHERE "
        HOPPER_QUEUE_KEEPS_HISTORY("g") ") "
        "SELECT g.queue, " HOPPER_QUEUE_NOTIFIES_DONE("g") ", " HOPPER_QUEUE_LIMITED("g")
        " FROM gone g",
        {INT8OID, INT8OID, TEXTOID}, spi::Planning::kWalkIndexes);

    const spi::Arg failed_at = spi::arg_datum(TimestampTzGetDatum(GetCurrentTimestamp()));
    spi::Connection conn;
    const char* state = failed_attempt::settle(
        conn, id,
        [&] {
            return conn.exec(retry, {spi::arg(id), spi::arg(token), error, retry_in_arg,
                                     spi::arg_bool(permanent), failed_at});
        },
        [&] {
            return conn.exec(bury, {spi::arg(id), spi::arg(token), error});
        });
    conn.finish();
    if (state == nullptr) PG_RETURN_NULL();
    PG_RETURN_TEXT_P(pg_guard([&] { return cstring_to_text(state); }));
}
