// Workers: queue_fail_taken records the failed attempt of a taken job (queue_take).
//
// A take that rolls back leaves its jobs exactly as they were, attempt count included, so a job
// whose work keeps failing would be taken again at once, forever. This counts the attempt and keeps
// the error: the job is retried after the queue's backoff, or buried once its attempts are used up,
// just as queue_fail does for a leased job. Called in the transaction that took the job, after
// rolling back to a savepoint made after the take, it first puts the job back (taken_here), so no
// other worker can take it before the failure is recorded. Called after the take itself rolled
// back, it fails the job if it is still available and due.
//
// It has no token, so two calls for one take (a client retrying a call whose reply it lost, two
// error handlers) must not count two attempts and bury the job early. In the transaction that
// recorded the failure, a second call finds it remembered (taken_here) and changes nothing. In a
// later one, the job the first call failed waits out its backoff: not due, so not a job anyone
// could have taken since, and it is left alone. (With retry_in => '0' a repeat in a later
// transaction cannot be told from a new failure.)
#include "hopper/args.hpp"
#include "hopper/batches.hpp"
#include "hopper/claim_hint.hpp"
#include "hopper/failed_attempt.hpp"
#include "hopper/sql.hpp"
#include "hopper/taken_here.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
}

using namespace hopper;

// queue_fail_taken(id, error, retry_in, permanent, worker) -> text
HOPPER_FUNCTION(hopper_queue_fail_taken) {
    int64_t id = args::job_id(fcinfo, 0);
    constexpr int64_t kMaxRetryIn = int64_t(366) * 86400 * 1000000;
    auto retry_in = args::duration(fcinfo, 2, "retry_in", 0, kMaxRetryIn, /*allow_zero=*/true);
    bool permanent = !args::is_null(fcinfo, 3) && PG_GETARG_BOOL(3);
    auto worker = args::optional_text(fcinfo, 4, "worker", args::kMaxWorker);

    spi::Arg error = spi::arg_text(args::error_text(fcinfo, 1));
    spi::Arg retry_in_arg = spi::arg_datum(args::duration_datum(retry_in), !retry_in);
    spi::Arg worker_arg = spi::arg_text(worker);

    // The job must be available: a taker that still holds it makes this wait for its end, and if
    // that taker commits, the job is finished and not ours to fail. Unless put back from this
    // transaction's take ($6), it must be due as well: a take only takes due jobs, and one that
    // is not is waiting out the backoff of a failure already recorded. By the clock at this call
    // ($7), not the transaction's start: a take that waited may have taken a job that fell due
    // after its transaction began. `f` is the job as the failed attempt leaves it: attempt
    // counted, this worker recorded. The backoff counts from that clock too, since a take's
    // transaction lasts as long as its work, and a repeated call must find the job not yet due.
    // With retry_in => '0' the job is due at once, to this transaction's own claims too.
    static spi::Statement retry(
        "WITH f AS (SELECT j.id, j.queue, j.attempt + 1 AS attempt, j.max_attempts, j.errors, "
        "    $5::text AS worker FROM hopper.jobs j WHERE j.id = $1 AND j.state OPERATOR(pg_catalog.=) 'available' "
        "    AND ($6 OR j.run_at <= $7) "
        "    FOR UPDATE OF j) "
        "UPDATE hopper.jobs j SET attempt = f.attempt, worker = f.worker, "
        "  run_at = CASE WHEN $3 OPERATOR(pg_catalog.=) interval '0' THEN pg_catalog.now() "
        "    ELSE $7 + COALESCE($3, " HOPPER_BACKOFF("f", "q") ") END, "
        "  last_error = $2, errors = " HOPPER_ERRORS_APPEND("f", "$2", "pg_catalog.now()") " "
        "FROM f, hopper.queues q "
        "WHERE j.id = f.id AND q.name = f.queue AND NOT $4 AND f.attempt < f.max_attempts "
        "RETURNING j.run_at > $7, j.queue, j.priority, j.run_at, q.limited",
        {INT8OID, TEXTOID, INTERVALOID, BOOLOID, TEXTOID, BOOLOID, TIMESTAMPTZOID},
        spi::Planning::kWalkIndexes);
    // Dead: to history with the error, as the attempt that failed (started when it was taken).
    static spi::Statement bury(
        "WITH g AS (DELETE FROM hopper.jobs WHERE id = $1 AND state OPERATOR(pg_catalog.=) 'available' "
        "  AND ($4 OR run_at <= $5) "
        "  RETURNING id, queue, priority, run_at, attempt + 1 AS attempt, max_attempts, created_at, "
        "    pg_catalog.now() AS started_at, kind, $3::text AS worker, dedup_key, concurrency_key, "
        "    progress, errors, progress_detail, payload), "
        "kept AS (" HOPPER_HISTORY_INSERT HOPPER_HISTORY_SELECT("g")
        "g.progress, $2, " HOPPER_ERRORS_APPEND("g", "$2", "pg_catalog.now()")
        ", g.progress_detail, g.payload, 'dead', " HOPPER_FINISHED_AT("g", "pg_catalog.now()") ", NULL FROM g WHERE "
        HOPPER_QUEUE_KEEPS_HISTORY("g") ") "
        "SELECT g.queue, " HOPPER_QUEUE_NOTIFIES_DONE("g") ", " HOPPER_QUEUE_LIMITED("g") " FROM g",
        {INT8OID, TEXTOID, TEXTOID, BOOLOID, TIMESTAMPTZOID}, spi::Planning::kWalkIndexes);

    const spi::Arg failed_at = spi::arg_datum(TimestampTzGetDatum(GetCurrentTimestamp()));
    // Read only: the command id below that of anything this call writes.
    const CommandId began = GetCurrentCommandId(false);
    spi::Connection conn;
    bool restored = taken_here::restore(conn, id);
    if (!restored && taken_here::failed_since_take(id)) {
        conn.finish();
        PG_RETURN_NULL();  // failed already for this take, in this transaction
    }
    // The statements below lock an available job, and claims pass over it meanwhile: if this
    // transaction (or its savepoint) rolls back, the job is below where they went. (A job put
    // back from this transaction's take is held by the take, whose rollback resets them.)
    if (!restored) claim_hint::clear_database_on_rollback();
    // A job still waiting in a packed row (its take rolled back) becomes a row of its own first,
    // as a cancel makes it: the statements below look in hopper.jobs.
    if (!restored) batches::unpack_job(conn, id);
    const char* state = failed_attempt::settle(
        conn, id,
        [&] {
            return conn.exec(retry, {spi::arg(id), error, retry_in_arg, spi::arg_bool(permanent),
                                     worker_arg, spi::arg_bool(restored), failed_at});
        },
        [&] {
            return conn.exec(bury,
                             {spi::arg(id), error, worker_arg, spi::arg_bool(restored), failed_at});
        });
    if (state != nullptr) taken_here::remember_failure(id, began);
    conn.finish();
    if (state == nullptr) PG_RETURN_NULL();
    PG_RETURN_TEXT_P(pg_guard([&] { return cstring_to_text(state); }));
}
