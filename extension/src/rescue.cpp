// See include/hopper/rescue.hpp.
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hopper/args.hpp"
#include "hopper/claim_commit.hpp"
#include "hopper/claim_hint.hpp"
#include "hopper/notify.hpp"
#include "hopper/reaper.hpp"
#include "hopper/rescue.hpp"
#include "hopper/sql.hpp"
#include "hopper/subtransaction.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/timestamp.h"
}

namespace hopper::rescue {

namespace {

// Rescues the jobs of queue that the CTE `expired` (ids, locked) names. $1 queue, $2 the clock,
// $3 most jobs, $4 the claim's clock (NULL: the reaper's, with backoff); the CTE may use $5 and $6.
#define HOPPER_RESCUE_EXPIRED(expired) \
    "WITH expired AS MATERIALIZED (" expired "), "                                                 \
    "q AS (SELECT * FROM hopper.queues WHERE name = $1), "                                         \
    "gone AS ("                                                                                    \
    "  DELETE FROM hopper.jobs j USING expired e WHERE j.id = e.id AND j.attempt >= j.max_attempts " \
    "  RETURNING j.*), "                                                                           \
    "kept AS (" HOPPER_HISTORY_INSERT HOPPER_HISTORY_SELECT("g")                                   \
    "  g.progress, 'lease expired (worker ' || COALESCE(g.worker, 'unknown') || ')', "             \
    HOPPER_ERRORS_APPEND("g", "'lease expired (worker ' || COALESCE(g.worker, 'unknown') || ')'", "$2") \
    ", g.progress_detail, g.payload, 'dead', " HOPPER_FINISHED_AT("g", "$2") ", NULL FROM gone g " \
    "  WHERE " HOPPER_QUEUE_KEEPS_HISTORY("g") "), "                                               \
    "dead AS (SELECT g.id, " HOPPER_QUEUE_NOTIFIES_DONE("g") " AS notify_done FROM gone g), "      \
    "back AS ("                                                                                    \
    "  UPDATE hopper.jobs j SET state = 'available', "                                             \
    "    run_at = CASE WHEN $4::timestamptz IS NULL "                                             \
    "      THEN $2 + (SELECT " HOPPER_BACKOFF("j", "q") " FROM q) "                              \
    "      ELSE GREATEST(LEAST($2, $4), j.run_at) END, "       \
    "    lease_token = NULL, lease_until = NULL, claimed_pid = NULL, claimed_backend_start = NULL, " \
    "    session_bound = false, "                                                                  \
    "    last_error = 'lease expired (worker ' || COALESCE(j.worker, 'unknown') || ')', "          \
    "    errors = " HOPPER_ERRORS_APPEND("j", "'lease expired (worker ' || COALESCE(j.worker, 'unknown') || ')'", "$2") \
    "  FROM expired e WHERE j.id = e.id AND j.attempt < j.max_attempts RETURNING j.id) "          \
    "SELECT (SELECT pg_catalog.count(*) FROM back), d.id, d.notify_done, "                         \
    "  COALESCE((SELECT limited FROM q), false) "                                                  \
    "FROM (SELECT NULL::bigint AS id) z "                                                          \
    "LEFT JOIN dead d ON true"

#define HOPPER_EXPIRED_OF_QUEUE                                                                   \
    "SELECT id FROM hopper.jobs WHERE queue = $1 AND state OPERATOR(pg_catalog.=) 'running' AND " \
    "lease_until < $2 "

// The reaper's order for expired leases, from a cursor on: a job a batch passed over (a trigger
// of the user's refused its rescue) stays expired and first in lease order.
#define HOPPER_EXPIRED_AFTER_CURSOR \
    "AND lease_until >= $5 AND (lease_until, id) > ($5, $6) ORDER BY lease_until, id LIMIT $3 "

// What a rescued job's run_at is ($4 of HOPPER_RESCUE_EXPIRED): the reaper's rescues come back
// after the queue's retry backoff (no clock); a claim's, at the earlier of the rescue's clock and
// the claim's own, so that the claim that rescued them finds them due, but not before the run_at
// they had (those the claim leaves, of another kind say, keep their place). (The rescue's clock
// runs from the real time, the claim's by default from its transaction's start: a job put back at
// the real time was not due for the claim that put it back, and went to the next one.)
using ClaimClock = std::optional<TimestampTz>;
constexpr ClaimClock kWithBackoff = std::nullopt;

spi::Arg claim_arg(ClaimClock claim) {
    return claim ? spi::arg_datum(TimestampTzGetDatum(*claim)) : spi::null_arg();
}

Counts expired_result(const std::string& queue, const spi::Result& r, ClaimClock claim) {
    Counts c;
    // Jobs put back keep their ids but get run_at = at, which may lie below the claim hint.
    if (r.rows() > 0 && r.get_int64(0, 1) > 0) {
        claim_hint::clear_at_end(queue);
        // A claim's rescue puts them back due: announced at commit, as a release is, for the
        // workers of the kinds this claim passes over (no reaper runs, or its due-scan would tell
        // them when their backoff ends). The claim may take them all itself: a wake-up to spare.
        if (claim) notify::queue_ready(queue);
    }
    // The rescued jobs' slots are free: a pull waiting on a limited queue may take them.
    bool limited = r.rows() > 0 && r.get_bool(0, 4);
    if (limited && (r.get_int64(0, 1) > 0 || !r.is_null(0, 2))) notify::slot_freed(queue);
    for (uint64_t i = 0; i < r.rows(); ++i) {
        c.retried = static_cast<uint64_t>(r.get_int64(i, 1));
        if (!r.is_null(i, 2)) {
            ++c.dead;
            notify::job_done(r.get_int64(i, 2), queue, "dead", r.get_bool(i, 3));
            claim_commit::not_only_claims();
        }
    }
    c.seen = c.retried + c.dead;
    return c;
}

// A job the reaper's batch failed on, told once per pass: it is left as it is for the next one.
void report_refused(int64_t id, const std::string& queue, const PgError& e) {
    pg_guard([&] {
        ereport(WARNING,
                (errcode(e.sqlstate()),
                 errmsg("rescue of job %lld (queue \"%s\") failed: %s", static_cast<long long>(id),
                        queue.c_str(), e.what()),
                 errhint("The job is left as it is and tried again at the next pass of the "
                         "reaper; the other jobs were rescued.")));
    });
}

// Whether queue has a lease that ended before at: asked before any rescue, since on the hot path
// there is usually nothing to rescue. Every pull that comes back short asks it (with no reaper
// running, every pull), so its plan (jobs_lease_idx on both columns) is made once.
bool any_expired(spi::Connection& conn, const std::string& queue, TimestampTz at) {
    static spi::Statement probe(
        "SELECT 1 FROM hopper.jobs WHERE queue = $1 AND state OPERATOR(pg_catalog.=) 'running' "
        "  AND lease_until < $2 "
        "LIMIT 1",
        {TEXTOID, TIMESTAMPTZOID}, CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
    return !conn.exec(probe, {spi::arg_text(queue), spi::arg_datum(TimestampTzGetDatum(at))})
                .empty();
}

// One statement: lock the expired jobs (skipping any another session is rescuing), move the
// exhausted ones to history as dead, put the others back.
Counts expired_batch(spi::Connection& conn, const std::string& queue, TimestampTz at, int64_t limit,
                     ClaimClock claim) {
    static spi::Statement st(
        HOPPER_RESCUE_EXPIRED(HOPPER_EXPIRED_OF_QUEUE
                              "ORDER BY lease_until LIMIT $3 FOR UPDATE SKIP LOCKED"),
        {TEXTOID, TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID}, spi::Planning::kWalkIndexes);
    spi::Result r = conn.exec(st, {spi::arg_text(queue), spi::arg_datum(TimestampTzGetDatum(at)),
                                   spi::arg(limit), claim_arg(claim)});
    return expired_result(queue, r, claim);
}

// The first $3 jobs of queue $1 whose lease ended before $2, in the reaper's order, read without
// locks: the rescue of each one locks it, and passes over it if another session holds it.
spi::Statement& expired_in_order() {
    static spi::Statement st(
        "SELECT id, lease_until FROM hopper.jobs WHERE queue = $1 "
        "  AND state OPERATOR(pg_catalog.=) 'running' AND lease_until < $2 "
        "ORDER BY lease_until, id LIMIT $3",
        {TEXTOID, TIMESTAMPTZOID, INT8OID}, spi::Planning::kWalkIndexes);
    return st;
}

// The rescue of the one expired job $5 (queue $1, clock $2, claim's clock $4; $3 unused).
Counts expired_one(spi::Connection& conn, const std::string& queue, TimestampTz at, int64_t id,
                   ClaimClock claim) {
    static spi::Statement one(
        HOPPER_RESCUE_EXPIRED(HOPPER_EXPIRED_OF_QUEUE "AND id = $5 FOR UPDATE SKIP LOCKED"),
        {TEXTOID, TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID, INT8OID}, spi::Planning::kWalkIndexes);
    spi::Result r = conn.exec(one, {spi::arg_text(queue), spi::arg_datum(TimestampTzGetDatum(at)),
                                    spi::arg(int64_t{1}), claim_arg(claim), spi::arg(id)});
    return expired_result(queue, r, claim);
}

// Whether an error a claim's rescue raised is about the jobs it touched (a trigger of the user's
// refusing one, a constraint, a bad value) rather than about the transaction or the server. The
// claim passes over the first kind and goes on; the second fails it as before: a cancel or a
// statement timeout (class 57, which in_subtransaction raises again itself), a serialization
// failure or a deadlock (40: the whole transaction is to be retried), a lock timeout (55P03), a
// read-only transaction (25), out of memory or disk (53), and errors of the system or of
// PostgreSQL itself (58, XX).
bool about_the_jobs(const PgError& e) {
    if (e.sqlstate() == ERRCODE_LOCK_NOT_AVAILABLE) return false;
    switch (ERRCODE_TO_CATEGORY(e.sqlstate())) {
        case ERRCODE_INVALID_TRANSACTION_STATE:
        case ERRCODE_TRANSACTION_ROLLBACK:
        case ERRCODE_INSUFFICIENT_RESOURCES:
        case ERRCODE_OPERATOR_INTERVENTION:
        case ERRCODE_SYSTEM_ERROR:
        case ERRCODE_INTERNAL_ERROR:
            return false;
        default:
            return true;
    }
}

// Runs one step of a claim's rescue in a subtransaction: true if it went through. A failure about
// the jobs undoes the step alone; any other fails the claim.
template <typename F>
bool claim_rescue_step(F&& step) {
    claim_hint::QuietRollbacks quiet;  // a refusal put no job back: no pull to wake for it
    std::optional<PgError> failed = in_subtransaction(std::forward<F>(step));
    if (failed && !about_the_jobs(*failed)) throw *failed;
    return !failed;
}

// How many jobs whose rescue fails a claim passes over, besides those it is short of: they stay
// expired and first in lease order, so a claim that tried only as many jobs as it missed would
// never get past them; without a bound a queue with many of them would cost every short claim
// a subtransaction each. The reaper, whose batches go past them all, rescues the rest.
constexpr int64_t kRefusedPassedOver = 10;

// A claim's rescue after its batch failed: the expired jobs one at a time, each in its own
// subtransaction, until `missing` are rescued. A job whose rescue fails is left as it was; the
// reaper reports it (WARNING) at each pass.
Counts expired_one_by_one_for_claim(spi::Connection& conn, const std::string& queue, TimestampTz at,
                                    TimestampTz claim_at, int64_t missing) {
    spi::Result jobs = conn.exec(expired_in_order(),
                                 {spi::arg_text(queue), spi::arg_datum(TimestampTzGetDatum(at)),
                                  spi::arg(missing + kRefusedPassedOver)});
    std::vector<int64_t> ids;
    for (uint64_t i = 0; i < jobs.rows(); ++i) ids.push_back(jobs.get_int64(i, 1));
    Counts c;
    // Fewer expired jobs than it read: it got to each of them (rescued or passed over).
    c.all_taken = ids.size() < static_cast<size_t>(missing + kRefusedPassedOver);
    for (int64_t id : ids) {
        if (c.retried + c.dead >= static_cast<uint64_t>(missing)) {
            c.all_taken = false;
            break;
        }
        ++c.seen;
        bool rescued = claim_rescue_step([&] {
            Counts one_job = expired_one(conn, queue, at, id, claim_at);
            c.retried += one_job.retried;
            c.dead += one_job.dead;
        });
        if (!rescued)
            pg_guard([&] {
                ereport(DEBUG1, (errmsg("hopper: a claim passed over job %lld of queue \"%s\", "
                                        "whose rescue failed",
                                        static_cast<long long>(id), queue.c_str())));
            });
    }
    return c;
}

}  // namespace

Counts expired_leases(spi::Connection& conn, const std::string& queue, TimestampTz at,
                      int64_t limit, bool backoff) {
    if (!any_expired(conn, queue, at)) return {};
    return expired_batch(conn, queue, at, limit, backoff ? kWithBackoff : ClaimClock(at));
}

Counts expired_leases(spi::Connection& conn, const std::string& queue, TimestampTz at,
                      int64_t limit, const Cursor& after) {
    if (!after.started) return expired_leases(conn, queue, at, limit, /*backoff=*/true);
    static spi::Statement st(
        HOPPER_RESCUE_EXPIRED(HOPPER_EXPIRED_OF_QUEUE HOPPER_EXPIRED_AFTER_CURSOR
                              "FOR UPDATE SKIP LOCKED"),
        {TEXTOID, TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID},
        spi::Planning::kWalkIndexes);
    spi::Result r =
        conn.exec(st, {spi::arg_text(queue), spi::arg_datum(TimestampTzGetDatum(at)),
                       spi::arg(limit), claim_arg(kWithBackoff),
                       spi::arg_datum(TimestampTzGetDatum(after.at)), spi::arg(after.id)});
    return expired_result(queue, r, kWithBackoff);
}

Counts expired_leases_one_by_one(spi::Connection& conn, const std::string& queue, TimestampTz at,
                                 int64_t limit, Cursor& after) {
    // The batch's jobs, read without locks: each one's own statement locks it, and passes over
    // it if another session holds it.
    static spi::Statement next(
        "SELECT id, lease_until FROM hopper.jobs WHERE queue = $1 "
        "  AND state OPERATOR(pg_catalog.=) 'running' AND lease_until < "
        "$2 " HOPPER_EXPIRED_AFTER_CURSOR,
        {TEXTOID, TIMESTAMPTZOID, INT8OID, BOOLOID, TIMESTAMPTZOID, INT8OID},
        spi::Planning::kWalkIndexes);
    spi::Arg queue_arg = spi::arg_text(queue);
    spi::Arg at_arg = spi::arg_datum(TimestampTzGetDatum(at));
    spi::Result jobs =
        after.started
            ? conn.exec(next, {queue_arg, at_arg, spi::arg(limit), spi::arg_bool(true),
                               spi::arg_datum(TimestampTzGetDatum(after.at)), spi::arg(after.id)})
            : conn.exec(expired_in_order(), {queue_arg, at_arg, spi::arg(limit)});
    std::vector<std::pair<int64_t, TimestampTz>> ids;
    for (uint64_t i = 0; i < jobs.rows(); ++i)
        ids.emplace_back(jobs.get_int64(i, 1), jobs.get_timestamptz(i, 2));
    Counts c;
    for (const auto& [id, lease_until] : ids) {
        std::optional<PgError> failed = in_subtransaction([&] {
            Counts one_job = expired_one(conn, queue, at, id, kWithBackoff);
            c.retried += one_job.retried;
            c.dead += one_job.dead;
        });
        if (failed) report_refused(id, queue, *failed);
        after = {true, lease_until, id};
    }
    c.seen = ids.size();
    return c;
}

#undef HOPPER_RESCUE_EXPIRED
#undef HOPPER_EXPIRED_OF_QUEUE
#undef HOPPER_EXPIRED_AFTER_CURSOR

namespace {

// A claim's rescue of up to `missing` expired leases of queue, at the claim's clock.
Counts for_claim(spi::Connection& conn, const std::string& queue, TimestampTz at, int64_t missing) {
    TimestampTz clock = args::lease_clock(at);
    // The probe is all a claim pays while no lease has expired, as before: the subtransactions
    // below are begun only when there is something to rescue, which is rare.
    if (!any_expired(conn, queue, clock)) {
        Counts none;
        none.all_taken = true;
        return none;
    }
    // A trigger of the user's that refuses one job's rescue must not fail the claim: every pull
    // of the queue would fail with it, until someone fixed the job. The batch runs in a
    // subtransaction; only if it fails are the jobs tried one at a time.
    Counts c;
    if (claim_rescue_step([&] { c = expired_batch(conn, queue, clock, missing, at); })) {
        // A batch that locked fewer than it could took every expired lease not held elsewhere.
        c.all_taken = c.seen < static_cast<uint64_t>(missing);
        return c;
    }
    return expired_one_by_one_for_claim(conn, queue, clock, at, missing);
}

}  // namespace

Counts before_claim(spi::Connection& conn, const std::string& queue, TimestampTz at,
                    int64_t wanted) {
    // A live reaper puts expired leases back within its pass, after the queue's backoff: the
    // claim leaves them to it, at the cost of one read of the reaper's PGPROC. The test is a hint
    // (a reaper that has just exited may still pass for alive until this backend's next check of
    // it, a few seconds at most); a claim that rescues while a reaper runs does nothing the short
    // claim does not, so erring that way is harmless.
    if (reaper::known_alive()) return {};
    return for_claim(conn, queue, at, wanted);
}

Counts for_short_claim(spi::Connection& conn, const std::string& queue, TimestampTz at,
                       int64_t wanted, uint64_t claimed, const Counts& before) {
    if (claimed >= static_cast<uint64_t>(wanted) || before.all_taken) return {};
    return for_claim(conn, queue, at, wanted - static_cast<int64_t>(claimed));
}

namespace {

#define HOPPER_GONE_ERROR(alias) \
    "'worker backend gone (pid ' || " alias ".claimed_pid::pg_catalog.text || ')'"

// The session-bound running jobs whose claimer has left, from the CTE `live` (alias j).
#define HOPPER_ORPHAN                                                                             \
    "j.state OPERATOR(pg_catalog.=) 'running' AND j.lease_until IS NOT NULL AND j.session_bound " \
    "AND NOT EXISTS ("                                                                            \
    "    SELECT 1 FROM live l WHERE l.pid = j.claimed_pid "                                       \
    "      AND (l.backend_start = j.claimed_backend_start OR l.backend_start IS NULL)) "

#define HOPPER_LIVE                                                                          \
    "WITH live AS MATERIALIZED ("                                                            \
    "  SELECT a.pid, a.backend_start FROM pg_catalog.pg_stat_get_activity(NULL::integer) a " \
    "  WHERE a.pid IS NOT NULL) "

// Rescues the orphans among the candidates `which` picks: $1 the clock, $2 most jobs, $3 an id.
// The live set is read after the statement's snapshot is taken, so a claimer whose claim we see
// and who is missing from it has really exited. (A backend whose start time this role may not
// see counts as alive: better late than a job taken from a live worker.) Candidates are then
// locked together with the token seen: a job re-claimed meanwhile by a newer backend has another
// token and is left. The last row tells how many candidates there were and the last one's id.
#define HOPPER_RESCUE_ORPHANS(which) \
    HOPPER_LIVE ", candidates AS MATERIALIZED ("                                               \
    "  SELECT j.id, j.lease_token FROM hopper.jobs j WHERE " HOPPER_ORPHAN which "), "         \
    "orphans AS MATERIALIZED ("                                                                \
    "  SELECT j.id FROM hopper.jobs j JOIN candidates c "                                      \
    "    ON c.id = j.id AND c.lease_token = j.lease_token "                                    \
    "  WHERE j.state OPERATOR(pg_catalog.=) 'running' FOR UPDATE OF j SKIP LOCKED), "          \
    "gone AS ("                                                                                \
    "  DELETE FROM hopper.jobs j USING orphans o WHERE j.id = o.id AND j.attempt >= j.max_attempts " \
    "  RETURNING j.*), "                                                                       \
    "kept AS (" HOPPER_HISTORY_INSERT HOPPER_HISTORY_SELECT("g")                               \
    "  g.progress, " HOPPER_GONE_ERROR("g") ", "                                               \
    HOPPER_ERRORS_APPEND("g", HOPPER_GONE_ERROR("g"), "$1")                                    \
    ", g.progress_detail, g.payload, 'dead', " HOPPER_FINISHED_AT("g", "$1") ", NULL FROM gone g " \
    "  WHERE " HOPPER_QUEUE_KEEPS_HISTORY("g") "), "                                           \
    "dead AS (SELECT g.id, g.queue, " HOPPER_QUEUE_NOTIFIES_DONE("g") " AS notify_done, "      \
    HOPPER_QUEUE_LIMITED("g") " AS limited FROM gone g), "                                     \
    "back AS ("                                                                                \
    "  UPDATE hopper.jobs j SET state = 'available', run_at = $1, "                            \
    "    lease_token = NULL, lease_until = NULL, claimed_pid = NULL, claimed_backend_start = NULL, " \
    "    session_bound = false, last_error = " HOPPER_GONE_ERROR("j") ", "                     \
    "    errors = " HOPPER_ERRORS_APPEND("j", HOPPER_GONE_ERROR("j"), "$1")                    \
    "  FROM orphans o WHERE j.id = o.id AND j.attempt < j.max_attempts RETURNING j.queue) "    \
    "SELECT 'back'::text, b.queue, pg_catalog.count(*)::bigint, false, false FROM back b "     \
    "GROUP BY b.queue "                                                                        \
    "UNION ALL SELECT 'dead'::text, d.queue, d.id, d.notify_done, d.limited FROM dead d "      \
    "UNION ALL SELECT 'seen'::text, pg_catalog.max(c.id)::pg_catalog.text, pg_catalog.count(*), " \
    "  false, false FROM candidates c"

// Where a run in batches starts: before every job id.
constexpr int64_t kFirstId = std::numeric_limits<int64_t>::min();

Counts orphan_result(const spi::Result& r, Cursor* after) {
    Counts c;
    for (uint64_t i = 0; i < r.rows(); ++i) {
        std::string what = r.get_text(i, 1);
        if (what == "seen") {
            c.seen = static_cast<uint64_t>(r.get_int64(i, 3));
            if (after != nullptr && !r.is_null(i, 2)) {
                after->started = true;
                after->id = std::stoll(r.get_text(i, 2));
            }
            continue;
        }
        std::string queue = r.get_text(i, 2);
        if (what == "back") {
            c.retried += static_cast<uint64_t>(r.get_int64(i, 3));
            claim_hint::clear_at_end(queue);
            notify::queue_ready(queue);
        } else {
            ++c.dead;
            notify::job_done(r.get_int64(i, 3), queue, "dead", r.get_bool(i, 4));
            claim_commit::not_only_claims();
            if (r.get_bool(i, 5)) notify::slot_freed(queue);
        }
    }
    return c;
}

}  // namespace

Counts orphaned_sessions(spi::Connection& conn, TimestampTz at, int64_t limit, Cursor* after) {
    // Candidates in id order from the cursor on, which moves past the last of them whether it
    // was rescued or not: a job another session holds locked (a long SELECT ... FOR UPDATE) or
    // whose rescue failed stays an orphan, first in that order. Picked first and locked after,
    // a batch full of them would rescue nothing, and every pass stopped there.
    static spi::Statement st(HOPPER_RESCUE_ORPHANS("AND j.id > $3 ORDER BY j.id LIMIT $2"),
                             {TIMESTAMPTZOID, INT8OID, INT8OID}, spi::Planning::kWalkIndexes);
    int64_t from = after != nullptr && after->started ? after->id : kFirstId;
    spi::Result r =
        conn.exec(st, {spi::arg_datum(TimestampTzGetDatum(at)), spi::arg(limit), spi::arg(from)});
    return orphan_result(r, after);
}

Counts orphaned_sessions_one_by_one(spi::Connection& conn, TimestampTz at, int64_t limit,
                                    Cursor& after) {
    static spi::Statement candidates(HOPPER_LIVE
                                     "SELECT j.id, j.queue FROM hopper.jobs j WHERE " HOPPER_ORPHAN
                                     "AND j.id > $2 ORDER BY j.id LIMIT $1",
                                     {INT8OID, INT8OID}, spi::Planning::kWalkIndexes);
    static spi::Statement one(HOPPER_RESCUE_ORPHANS("AND j.id = $3"),
                              {TIMESTAMPTZOID, INT8OID, INT8OID}, spi::Planning::kWalkIndexes);
    spi::Result jobs =
        conn.exec(candidates, {spi::arg(limit), spi::arg(after.started ? after.id : kFirstId)});
    std::vector<std::pair<int64_t, std::string>> ids;
    for (uint64_t i = 0; i < jobs.rows(); ++i)
        ids.emplace_back(jobs.get_int64(i, 1), jobs.get_text(i, 2));
    Counts c;
    for (const auto& [id, queue] : ids) {
        std::optional<PgError> failed = in_subtransaction([&] {
            spi::Result r = conn.exec(
                one, {spi::arg_datum(TimestampTzGetDatum(at)), spi::arg(limit), spi::arg(id)});
            Counts one_job = orphan_result(r, nullptr);
            c.retried += one_job.retried;
            c.dead += one_job.dead;
        });
        if (failed) report_refused(id, queue, *failed);
        after.started = true;
        after.id = id;
    }
    c.seen = ids.size();
    return c;
}

#undef HOPPER_RESCUE_ORPHANS
#undef HOPPER_LIVE
#undef HOPPER_ORPHAN
#undef HOPPER_GONE_ERROR

}  // namespace hopper::rescue
