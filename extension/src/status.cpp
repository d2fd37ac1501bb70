// Reading: job_status (one job, wherever it is) and queue_stats (counts per queue and state).
#include "hopper/args.hpp"
#include "hopper/batches.hpp"
#include "hopper/jobs.hpp"
#include "hopper/queues.hpp"
#include "hopper/result.hpp"
#include "hopper/sql.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/timestamp.h"
}

using namespace hopper;

HOPPER_FUNCTION(hopper_job_status) {
    int64_t id = args::job_id(fcinfo, 0);
    // Columns in hopper.job_info order. An available job whose run_at is ahead reads "scheduled".
    // A waiting job of a packed row reads as the freshly pushed job it stands for. The branches
    // run in order and the LIMIT stops at the first row, so a job found in hopper.jobs or history
    // never reaches the packed rows; one statement (one snapshot) keeps a job that a claim moves
    // out of its row meanwhile from being missed by both lookups. The packed lookup walks the
    // primary key down from the id, whatever the statistics say when the plan is made.
    static spi::Statement st(
        "SELECT id, queue, kind, "
        "  " HOPPER_REPORTED_STATE_AT(HOPPER_CLOCK) ", "
        "  attempt, max_attempts, priority, run_at, created_at, started_at, NULL::timestamptz, "
        "  worker, last_error, errors, NULL::jsonb, progress, progress_detail, payload "
        "FROM hopper.jobs WHERE id = $1 "
        "UNION ALL "
        "SELECT id, queue, kind, state::text, attempt, max_attempts, priority, run_at, created_at, "
        "  started_at, finished_at, worker, last_error, errors, result, progress, progress_detail, "
        "  payload "
        "FROM hopper.job_history WHERE id = $1 "
        "UNION ALL "
        "(SELECT $1, b.queue, b.kind, "
        "  CASE WHEN b.run_at > " HOPPER_CLOCK " THEN 'scheduled' ELSE 'available' END, "
        "  0, b.max_attempts, b.priority, b.run_at, b.created_at, NULL::timestamptz, "
        "  NULL::timestamptz, NULL::text, NULL::text, NULL::jsonb, NULL::jsonb, NULL::real, "
        "  NULL::jsonb, b.payloads[pg_catalog.array_position(b.ids, $1)] "
        " FROM hopper.job_batches b " HOPPER_PACKED_ROW_OF("b", "$1") ") "
        "LIMIT 1",
        {INT8OID}, spi::Planning::kWalkIndexes);
    spi::Connection conn;
    spi::Result r = conn.exec(st, {spi::arg(id)});
    // Found nowhere: the DETAIL says whether the id was issued, so that a waiter can tell a job
    // that finished unkept from a wrong id.
    if (r.empty()) throw jobs::unknown_job(id, jobs::issued(conn, id));
    Datum row = result::composite(fcinfo, conn, r, 0);
    conn.finish();
    return row;
}

// queue_stats' statement: `since` adds to the bound of the finished jobs counted, `where` picks
// the queues.
#define HOPPER_QUEUE_STATS(since, where) \
    HOPPER_CLOCK_CTE                     \
    "SELECT q.name, l.available + p.available, l.scheduled + p.scheduled, r.running, " \
    "  h.completed, h.dead, h.cancelled, " \
    /* A run_at of -infinity (written by hand) has no finite age: the earliest timestamp */ \
    /* stands in, where the subtraction failed the whole call. */ \
    "  " HOPPER_CLOCK_OF_CTE \
    " - CASE WHEN LEAST(l.oldest_available, p.oldest_available) = " \
    "    '-infinity' THEN '4714-11-24 00:00:00+00 BC'::timestamptz " \
    "    ELSE LEAST(l.oldest_available, p.oldest_available) END, q.paused " \
    "FROM hopper.queues q " \
    "CROSS JOIN LATERAL (" \
    "  SELECT pg_catalog.count(*) FILTER (WHERE run_at <= " HOPPER_CLOCK_OF_CTE \
    ") AS available, " \
    "         pg_catalog.count(*) FILTER (WHERE run_at > " HOPPER_CLOCK_OF_CTE \
    ") AS scheduled, " \
    "         pg_catalog.min(run_at) FILTER (WHERE run_at <= " HOPPER_CLOCK_OF_CTE \
    ") " \
    "           AS oldest_available " \
    "  FROM hopper.jobs j WHERE j.queue = q.name " \
    "    AND j.state OPERATOR(pg_catalog.=) 'available') l " \
    "CROSS JOIN LATERAL (" \
    "  SELECT pg_catalog.count(*) AS running FROM hopper.jobs j " \
    "  WHERE j.queue = q.name AND j.lease_until IS NOT NULL " \
    "    AND j.state OPERATOR(pg_catalog.=) 'running') r " \
    "CROSS JOIN LATERAL (" \
    "  SELECT COALESCE(pg_catalog.sum(pg_catalog.cardinality(b.ids) - b.taken) " \
    "           FILTER (WHERE b.run_at <= " HOPPER_CLOCK_OF_CTE \
    "), 0) AS available, " \
    "         COALESCE(pg_catalog.sum(pg_catalog.cardinality(b.ids) - b.taken) " \
    "           FILTER (WHERE b.run_at > " HOPPER_CLOCK_OF_CTE \
    "), 0) AS scheduled, " \
    "         pg_catalog.min(b.run_at) FILTER (WHERE b.run_at <= " HOPPER_CLOCK_OF_CTE \
    ") " \
    "           AS oldest_available " \
    "  FROM hopper.job_batches b WHERE b.queue = q.name) p " \
    "CROSS JOIN LATERAL (" \
    "  SELECT pg_catalog.count(*) FILTER (WHERE state OPERATOR(pg_catalog.=) 'completed') " \
    "           AS completed, " \
    "         pg_catalog.count(*) FILTER (WHERE state OPERATOR(pg_catalog.=) 'dead') AS dead, " \
    "         pg_catalog.count(*) FILTER (WHERE state OPERATOR(pg_catalog.=) 'cancelled') " \
    "           AS cancelled " \
    "  FROM hopper.job_history h WHERE h.queue = q.name " since \
    "    AND h.finished_at >= " HOPPER_CLOCK_OF_CTE " - q.retention) h " where \
    "ORDER BY q.name"

HOPPER_FUNCTION(hopper_queue_stats) {
    std::optional<std::string> queue;
    if (!args::is_null(fcinfo, 0)) queue = args::queue_name(fcinfo, 0);
    // The waiting jobs of packed rows are available (or scheduled) jobs like any other; a row
    // holds those past its taken ones, all with the row's run_at.
    //
    // No index of hopper.jobs has all of a queue's jobs, and a count over every state could only
    // read the whole table: a second for a queue of six jobs beside 3.3 million of another. But
    // hopper.jobs holds live jobs alone, available or running, and each state has an index of its
    // own that leads with the queue: jobs_pull_idx has every available job (with its run_at, so
    // the counts are read from the index), jobs_lease_idx every running one, since lease_until
    // is set exactly while a job runs (the concurrency limits count running jobs the same way).
    // Each is walked for the queue's entries alone, whatever the statistics say (kWalkIndexes:
    // with the queue a parameter of the lateral join, the planner prices it as an average queue
    // and reads the table).
    //
    // The finished counts count the history that each queue's retention keeps, from the
    // statement's clock (the reaper reckons its cutoff from its own, and prunes every
    // hopper.reaper_prune_interval). For one queue the bound is also a parameter ($2,
    // queues::history_kept_since), by which the executor leaves out the days' partitions before
    // it as it starts (partition pruning, "Subplans Removed"): the comparison with q.retention
    // alone is known only row by row, and every day that another queue's longer retention keeps
    // was opened and read (24-33 ms a call beside a year of days, bench/history_days.sh; 0.4-0.8
    // ms now). A generic plan, which locks the days it leaves out and nothing more: a plan made
    // for each call would leave them out as it is made, but its making cost 1.4-1.9 ms a call,
    // and the plan cache, which prices a generic plan with every day in it, never chose one.
    static spi::Statement one(HOPPER_QUEUE_STATS("AND h.finished_at >= $2 ", "WHERE q.name = $1 "),
                              {TEXTOID, TIMESTAMPTZOID}, CURSOR_OPT_GENERIC_PLAN,
                              spi::Planning::kWalkIndexes);
    static spi::Statement every(HOPPER_QUEUE_STATS("", ""), {}, spi::Planning::kWalkIndexes);
#undef HOPPER_QUEUE_STATS
    result::SetResult out(fcinfo);
    spi::Connection conn;
    TimestampTz kept_since = DT_NOBEGIN;
    if (queue) kept_since = queues::history_kept_since(conn, *queue);
    spi::Result r = queue ? conn.exec(one, {spi::arg_text(queue),
                                            spi::arg_datum(TimestampTzGetDatum(kept_since))})
                          : conn.exec(every, {});
    for (uint64_t i = 0; i < r.rows(); ++i) out.add_row(r, i);
    conn.finish();
    return (Datum)0;
}
