// Operators: cancel a live job, retry a dead or cancelled one.
#include <optional>
#include <string>

#include "hopper/args.hpp"
#include "hopper/batches.hpp"
#include "hopper/claim_hint.hpp"
#include "hopper/jobs.hpp"
#include "hopper/notify.hpp"
#include "hopper/queue_lock.hpp"
#include "hopper/queues.hpp"
#include "hopper/sql.hpp"

extern "C" {
#include "catalog/pg_type.h"
}

using namespace hopper;

namespace {
constexpr uint32_t kRetryKeyLockKey1 = 0x686f706b;  // "hopk": (queue, dedup key) of a retry
}  // namespace

HOPPER_FUNCTION(hopper_queue_cancel) {
    int64_t id = args::job_id(fcinfo, 0);
    // A running job's holder learns of it at its next heartbeat (false) and stops.
    static spi::Statement st(
        "WITH gone AS (DELETE FROM hopper.jobs WHERE id = $1 RETURNING *), "
        "kept AS (" HOPPER_HISTORY_INSERT HOPPER_HISTORY_SELECT("g")
        "g.progress, g.last_error, g.errors, g.progress_detail, g.payload, 'cancelled', "
        HOPPER_FINISHED_AT("g", "pg_catalog.now()") ", NULL FROM gone g WHERE " HOPPER_QUEUE_KEEPS_HISTORY("g") ") "
        "SELECT g.queue, " HOPPER_QUEUE_NOTIFIES_DONE("g") ", g.state OPERATOR(pg_catalog.=) 'running' AND "
        HOPPER_QUEUE_LIMITED("g") " FROM gone g",
        {INT8OID}, spi::Planning::kWalkIndexes);
    // A finished job: nothing to cancel. No job goes from history back into a packed row
    // (queue_retry puts it into hopper.jobs), so the packed rows need not be looked at.
    static spi::Statement finished("SELECT 1 FROM hopper.job_history WHERE id = $1", {INT8OID},
                                   spi::Planning::kWalkIndexes);
    spi::Connection conn;
    // An available job is locked by the delete, and passed over by claims meanwhile.
    claim_hint::clear_database_on_rollback();
    spi::Result r = conn.exec(st, {spi::arg(id)});
    bool known = !r.empty();
    if (!known) known = !conn.exec(finished, {spi::arg(id)}).empty();
    if (!known) {
        // A waiting job of a packed row becomes an ordinary row first (its row's other jobs with
        // it, still available). The cancel runs again even when no row held it: a claim may have
        // moved it from its row into hopper.jobs since the first look, as a running job. History
        // is looked at first: finding no row that holds the id walks every packed row below it
        // (HOPPER_PACKED_ROW_OF), and a cancel of a finished job beside 5,000 packed rows took
        // 2.5-3.9 ms (0.7-2.3 ms without the walk).
        batches::unpack_job(conn, id);
        r = conn.exec(st, {spi::arg(id)});
    }
    bool cancelled = !r.empty();
    if (cancelled) {
        notify::job_done(id, r.get_text(0, 1), "cancelled", r.get_bool(0, 2));
        if (r.get_bool(0, 3)) notify::slot_freed(r.get_text(0, 1));
    } else if (!known)
        jobs::require_known(conn, id);  // already finished, unkept: false; unknown: P0002
    conn.finish();
    PG_RETURN_BOOL(cancelled);
}

namespace {

// Back to the hot table as a fresh job: attempts start over, errors are kept for the record.
#define HOPPER_RETRY_BACK                                                              \
    "WITH back AS (DELETE FROM hopper.job_history WHERE id = $1 "                      \
    "  AND state OPERATOR(pg_catalog.=) ANY ('{dead,cancelled}'::hopper.job_state[]) " \
    "    RETURNING *) "
#define HOPPER_RETRY_INSERT                                                                    \
    "INSERT INTO hopper.jobs (id, queue, state, priority, run_at, attempt, max_attempts, "     \
    "  created_at, kind, dedup_key, concurrency_key, last_error, errors, payload) "            \
    "SELECT id, queue, 'available', priority, pg_catalog.now(), 0, max_attempts, created_at, " \
    "kind, "                                                                                   \
    "  dedup_key, concurrency_key, last_error, errors, payload FROM back "

spi::Statement& retry_statement() {
    static spi::Statement st(HOPPER_RETRY_BACK HOPPER_RETRY_INSERT
                             "RETURNING queue, priority, run_at",
                             {INT8OID}, spi::Planning::kWalkIndexes);
    return st;
}

// The same for a job with a dedup key. A push of the key in flight is invisible to the check for
// a holder; the INSERT waits for it and, once it commits, inserts nothing rather than meet the
// unique index's bare 23505: the last column says so, and the caller then names the holder (its
// error undoes the DELETE). The speculative insertion costs only the retries of keyed jobs.
spi::Statement& keyed_retry_statement() {
    static spi::Statement st(
        HOPPER_RETRY_BACK ", ins AS (" HOPPER_RETRY_INSERT
                          "ON CONFLICT (queue, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING "
                          "RETURNING queue, priority, run_at) "
                          "SELECT i.queue, i.priority, i.run_at, i.queue IS NULL FROM back b "
                          "LEFT JOIN ins i ON true",
        {INT8OID}, spi::Planning::kWalkIndexes);
    return st;
}

#undef HOPPER_RETRY_BACK
#undef HOPPER_RETRY_INSERT

PgError key_taken(int64_t id, const std::string& key, std::optional<int64_t> holder) {
    return PgError(ERRCODE_UNIQUE_VIOLATION,
                   "job " + std::to_string(id) + " cannot be retried: its dedup key \"" +
                       args::clip(key, 200) + "\" belongs to " +
                       (holder ? "unfinished job " + std::to_string(*holder)
                               : std::string("an unfinished job")),
                   {}, "Retry it once that job has finished, or push it again.");
}

}  // namespace

HOPPER_FUNCTION(hopper_queue_retry) {
    int64_t id = args::job_id(fcinfo, 0);
    spi::Connection conn;
    // The job goes back into its queue as a push would: under the queue's lock (queues::hold),
    // and only while the queue exists.
    static spi::Statement queue_of(
        "SELECT queue, dedup_key, state OPERATOR(pg_catalog.=) "
        "  ANY ('{dead,cancelled}'::hopper.job_state[]) FROM hopper.job_history "
        "WHERE id = $1",
        {INT8OID}, spi::Planning::kWalkIndexes);
    // Its dedup key may have gone to a job pushed since: two unfinished jobs never share one.
    static spi::Statement key_holder(
        "SELECT id FROM hopper.jobs WHERE queue = $1 AND dedup_key = $2 LIMIT 1",
        {TEXTOID, TEXTOID}, spi::Planning::kWalkIndexes);
    spi::Result q = conn.exec(queue_of, {spi::arg(id)});
    std::optional<std::string> key;
    if (!q.empty()) {
        std::string queue = q.get_text(0, 1);
        queues::hold(conn, queue);
        queues::require(conn, queue);
        if (q.get_bool(0, 3) && !q.is_null(0, 2)) {
            key = q.get_text(0, 2);
            // Two retries of jobs with one key run one after the other, so that the second sees
            // the first's job and names it (before, it met the unique index: a bare 23505).
            queue_lock::acquire(
                queue_lock::tag(kRetryKeyLockKey1, queue_lock::hash(queue + '\n' + *key)),
                ExclusiveLock);
            spi::Result h = conn.exec(key_holder, {spi::arg_text(queue), spi::arg_text(*key)});
            if (!h.empty()) throw key_taken(id, *key, h.get_int64(0, 1));
        }
    }
    spi::Result r = conn.exec(key ? keyed_retry_statement() : retry_statement(), {spi::arg(id)});
    if (!r.empty() && key && r.get_bool(0, 4)) {
        // A push of the key committed while the INSERT waited: a new statement sees its job.
        spi::Result h =
            conn.exec(key_holder, {spi::arg_text(q.get_text(0, 1)), spi::arg_text(*key)});
        throw key_taken(id, *key,
                        h.empty() ? std::nullopt : std::optional<int64_t>(h.get_int64(0, 1)));
    }
    if (r.empty()) {
        std::string state = jobs::state_of(conn, id);
        throw PgError(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                      "job " + std::to_string(id) + " is " + state +
                          "; only dead or cancelled jobs can be retried");
    }
    claim_hint::made_available(r.get_text(0, 1), {r.get_int16(0, 2), r.get_timestamptz(0, 3), id},
                               false);
    notify::queue_ready(r.get_text(0, 1));
    conn.finish();
    PG_RETURN_BOOL(true);
}
