// Listing: queue_jobs (the jobs of one queue, optionally in one state, newest first).

#include "hopper/args.hpp"
#include "hopper/queues.hpp"
#include "hopper/result.hpp"
#include "hopper/sql.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/timestamp.h"
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

// Whether the packed row `b`'s jobs are in the state asked for ($2, NULL for all): they share its
// run_at.
#define HOPPER_PACKED_IN_STATE(b)                                             \
    "($2::text IS NULL OR $2 = CASE WHEN " b ".run_at > " HOPPER_CLOCK_OF_CTE \
    " THEN 'scheduled' ELSE 'available' END) "

HOPPER_FUNCTION(hopper_queue_jobs) {
    std::string queue = args::queue_name(fcinfo, 0);
    std::optional<std::string> state = state_arg(fcinfo, 1);
    int32_t lim = limit_arg(fcinfo, 2);
    // Which of the three places can hold jobs in the state asked for: live jobs (hopper.jobs),
    // finished ones (hopper.job_history) and the waiting jobs of packed rows. Packed jobs are due:
    // a batch is packed only if it is due by the start of its push's transaction
    // (batches::packable), so a packed row's run_at is never later than its created_at, and
    // "scheduled" reads no packed row, for the reason it reads jobs_delayed_idx below.
    bool finished = state && (*state == "completed" || *state == "dead" || *state == "cancelled");
    bool packed = !state || *state == "available";
    bool running = state && *state == "running";
    // Where the newest n waiting jobs of the queue's packed rows start: its rows are walked from
    // the highest last_id down (job_batches_list_idx), one row per step, until the rows walked
    // hold n waiting jobs. The lowest of those is at or below the n-th newest packed job of the
    // queue, so no row whose last_id is below it holds one of the newest n; rows above it that
    // were not walked (rows of batches pushed at the same time interleave their ids) are read by
    // the listing below. Before, the listing unnested and sorted every packed job of the queue:
    // 240-440 ms for 3 jobs of a backlog of 500,000. A statement of its own, run on the
    // listing's snapshot: inside the listing, the walk made each call's plan and the memory it
    // took so large that every call went back to the kernel for pages (listings of a small queue
    // went from 0.5 ms to 4). Its state filter reads an earlier clock than the listing's, so that
    // the rows it counts are among those the listing reads.
    static spi::Statement packed_start(
        HOPPER_CLOCK_CTE
        "SELECT (WITH RECURSIVE walk AS ("
        "  (SELECT b.first_id, b.last_id, "
        "     (pg_catalog.cardinality(b.ids) - b.taken)::bigint AS total, "
        "     b.ids[b.taken + 1] AS start "
        "   FROM hopper.job_batches b WHERE b.queue = $1 AND " HOPPER_PACKED_IN_STATE("b")
        "   ORDER BY b.last_id DESC, b.first_id DESC LIMIT 1) "
        "  UNION ALL "
        "  SELECT n.first_id, n.last_id, w.total + n.waiting, LEAST(w.start, n.front) "
        "  FROM walk w, LATERAL ("
        "    SELECT b.first_id, b.last_id, "
        "      (pg_catalog.cardinality(b.ids) - b.taken)::bigint AS waiting, "
        "      b.ids[b.taken + 1] AS front "
        "    FROM hopper.job_batches b "
        "    WHERE b.queue = $1 AND ROW(b.last_id, b.first_id) < ROW(w.last_id, w.first_id) "
        "      AND " HOPPER_PACKED_IN_STATE("b")
        "    ORDER BY b.last_id DESC, b.first_id DESC LIMIT 1) n "
        "  WHERE w.total < $3) "
        "SELECT pg_catalog.min(walk.start) FROM walk)",
        {TEXTOID, TEXTOID, INT4OID}, CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
    // Columns in hopper.job_info order, computed as job_status computes them: the waiting jobs of
    // packed rows as the freshly pushed jobs they stand for. Each place gives its own newest n,
    // in id order from an index, so that the newest jobs of a queue with a long history cost what
    // n of them cost: one statement over all of them sorted the whole history of the queue. The
    // flags ($4, $6, $8) and the state ($7) are constants of each call's own plan, so that a
    // place that cannot hold the state asked for is not read, a finished state reads
    // job_history_queue_idx, "running" reads jobs_lease_idx (lease_until is set exactly while a
    // job runs), and "scheduled" ($9) reads jobs_delayed_idx from the current time on: a job due
    // later than the statement's clock was due later than its push (HOPPER_CLOCK), so it is in
    // that index, and the waiting jobs due now are not walked (the index is by time, then queue:
    // other queues' scheduled jobs are passed over in the index alone). now(), never later than
    // the clock, is there for the planner, which cannot estimate the clock's InitPlan. Packed
    // rows are read from job_batches_list_idx, from the start found above ($10) up. The indexes
    // are walked whatever the statistics say (kWalkIndexes), so that a plan made before they saw
    // the table fill does not read every packed row of the queue. Finished jobs are those the
    // queue's retention keeps ($11, queues::history_kept_since): each call's plan leaves out the
    // days' partitions before it, not even locked, where every day that a longer retention of
    // another queue keeps was planned and read (74-133 ms for 5 jobs beside a year of days,
    // bench/history_days.sh; 1.1-2.4 ms now).
    static spi::Statement st(
        HOPPER_CLOCK_CTE
        "SELECT * FROM ("
        "  (SELECT id, queue, kind, "
        "     " HOPPER_REPORTED_STATE_AT(HOPPER_CLOCK_OF_CTE)
        " AS state, "
        "     attempt, max_attempts, priority, run_at, created_at, started_at, "
        "     NULL::timestamptz AS finished_at, worker, last_error, errors, NULL::jsonb AS result, "
        "     progress, progress_detail, payload "
        "   FROM hopper.jobs "
        "   WHERE $4 AND queue = $1 AND (NOT $5 OR lease_until IS NOT NULL) "
        "     AND ($2::text IS NULL OR $2 = CASE WHEN state OPERATOR(pg_catalog.=) 'available' "
        "       AND run_at > " HOPPER_CLOCK_OF_CTE " THEN 'scheduled' ELSE state::text END) "
        "     AND (NOT $9 OR (state OPERATOR(pg_catalog.=) 'available' AND run_at > created_at "
        "       AND run_at > pg_catalog.now() AND run_at > " HOPPER_CLOCK_OF_CTE ")) "
        "   ORDER BY id DESC LIMIT $3) "
        "  UNION ALL "
        "  (SELECT id, queue, kind, state::text, attempt, max_attempts, priority, run_at, "
        "     created_at, started_at, finished_at, worker, last_error, errors, result, progress, "
        "     progress_detail, payload "
        "   FROM hopper.job_history "
        "   WHERE $6 AND queue = $1 AND finished_at >= $11 AND ($7::text IS NULL "
        "     OR state OPERATOR(pg_catalog.=) $7::hopper.job_state) "
        "   ORDER BY id DESC LIMIT $3) "
        "  UNION ALL "
        "  (SELECT u.id, b.queue, b.kind, "
        "     CASE WHEN b.run_at > " HOPPER_CLOCK_OF_CTE " THEN 'scheduled' ELSE 'available' END, "
        "     0, b.max_attempts, b.priority, b.run_at, b.created_at, NULL::timestamptz, "
        "     NULL::timestamptz, NULL::text, NULL::text, NULL::jsonb, NULL::jsonb, NULL::real, "
        "     NULL::jsonb, u.payload "
        "   FROM hopper.job_batches b, ROWS FROM (pg_catalog.unnest(b.ids[b.taken + 1 :]), "
        "     pg_catalog.unnest(b.payloads[b.taken + 1 :])) u(id, payload) "
        "   WHERE $8 AND b.queue = $1 AND b.last_id >= $10 AND " HOPPER_PACKED_IN_STATE("b")
        "   ORDER BY u.id DESC LIMIT $3)) j "
        "ORDER BY j.id DESC LIMIT $3",
        {TEXTOID, TEXTOID, INT4OID, BOOLOID, BOOLOID, BOOLOID, TEXTOID, BOOLOID, BOOLOID, INT8OID,
         TIMESTAMPTZOID},
        CURSOR_OPT_CUSTOM_PLAN, spi::Planning::kWalkIndexes);
    result::SetResult out(fcinfo);
    spi::Connection conn;
    TimestampTz kept_since = queues::history_kept_since(conn, queue);
    // The walk and the listing see the same rows: on snapshots of their own, a claim committed
    // in between could leave fewer than n packed jobs above the start the walk found.
    spi::SharedSnapshot snapshot;
    spi::Arg start = spi::null_arg();
    if (packed) {
        spi::Result w = conn.exec(packed_start, snapshot,
                                  {spi::arg_text(queue), spi::arg_text(state), spi::arg_int4(lim)});
        if (!w.is_null(0, 1)) start = spi::arg(w.get_int64(0, 1));
    }
    spi::Result r = conn.exec(
        st, snapshot,
        {spi::arg_text(queue), spi::arg_text(state), spi::arg_int4(lim), spi::arg_bool(!finished),
         spi::arg_bool(running), spi::arg_bool(!state || finished),
         spi::arg_text(finished ? state : std::nullopt), spi::arg_bool(!start.isnull),
         spi::arg_bool(state && *state == "scheduled"), start,
         spi::arg_datum(TimestampTzGetDatum(kept_since))});
    for (uint64_t i = 0; i < r.rows(); ++i) out.add_row(r, i);
    snapshot.release();
    conn.finish();
    return (Datum)0;
}

#undef HOPPER_PACKED_IN_STATE
