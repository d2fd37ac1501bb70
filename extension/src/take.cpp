// Workers: queue_take finishes jobs in the caller's transaction, held by its row locks alone.
//
// The "one long transaction" pattern: BEGIN; take; do the work (and write its results) in the
// same transaction; COMMIT. The jobs are completed when the transaction commits, and untouched if
// it rolls back or its session dies: the row locks are the claim, so there is no lease, no token
// and no claim UPDATE. Per job it costs one DELETE (and the history row) where a pull and a
// completion cost an UPDATE with two new index entries and then the DELETE.
#include <string>

#include "hopper/args.hpp"
#include "hopper/batches.hpp"
#include "hopper/claim_hint.hpp"
#include "hopper/direct_claim.hpp"
#include "hopper/pull_wait.hpp"
#include "hopper/reaper.hpp"
#include "hopper/rescue.hpp"
#include "hopper/result.hpp"
#include "hopper/taken_here.hpp"
#include "hopper/sql.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "access/xact.h"
#include "utils/timestamp.h"
}

using namespace hopper;

namespace {

// Result columns: id, queue, kind, payload, attempt, run_at, created_at (hopper.taken_job), then
// the priority (for the claim hint), whether the queue announces finished jobs, and whether the
// job came from a packed row.
// clang-format off
// The queue's settings, and the first $3 available jobs of hopper.jobs in pull order, locked; `gate`
// says which queues take them here.
#define HOPPER_TAKE_CANDIDATES(resume_condition, gate)                                             \
    "WITH q AS (SELECT limited, packed, notify_done, retention > interval '0' AS keeps "           \
    "  FROM hopper.queues WHERE name = $1 AND NOT paused), "                                       \
    "candidates AS MATERIALIZED ("                                                                 \
    "  SELECT id, priority, run_at FROM hopper.jobs "                                              \
    "  WHERE queue = $1 AND state OPERATOR(pg_catalog.=) 'available' AND run_at <= $2 " resume_condition                \
    "    AND ($4::text[] IS NULL OR kind = ANY ($4)) "                                             \
    "    AND EXISTS (SELECT 1 FROM q WHERE " gate ") "                                             \
    "  ORDER BY priority, run_at, id LIMIT $3 FOR UPDATE SKIP LOCKED), "

// Takes the jobs of hopper.jobs whose ids the query `ids` gives out of the table.
#define HOPPER_TAKE_DELETE(ids)                                                                    \
    "deleted AS ("                                                                                 \
    "  DELETE FROM hopper.jobs j WHERE j.id = ANY (ARRAY(SELECT id FROM " ids ")) "                \
    "  RETURNING j.id, j.queue, j.priority, j.run_at, j.attempt + 1 AS attempt, j.max_attempts, "  \
    "    j.created_at, LEAST($2, pg_catalog.clock_timestamp()) AS started_at, j.kind, $5 AS worker, j.dedup_key, j.concurrency_key, "   \
    "    j.last_error, j.errors, j.progress_detail, j.payload, false AS packed), "

// The jobs `taken` go to history (a queue that keeps it) and back to the caller; a queue that takes
// nothing here answers a marker row of NULLs (marker_where), its last column `marker`.
#define HOPPER_TAKE_FINISH(marker, marker_where)                                                   \
    "kept AS (" HOPPER_HISTORY_INSERT HOPPER_HISTORY_SELECT("t")                                   \
    "  1.0::real, t.last_error, t.errors, t.progress_detail, t.payload, 'completed', "             \
    "  " HOPPER_FINISHED_AT("t", "pg_catalog.now()") ", NULL "                                     \
    "FROM taken t WHERE (SELECT keeps FROM q)) "                                                   \
    "SELECT NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::integer, NULL::timestamptz, " \
    "  NULL::timestamptz, NULL::smallint, NULL::boolean, " marker " "                              \
    "FROM q WHERE " marker_where " "                                                               \
    "UNION ALL "                                                                                   \
    "(SELECT t.id, t.queue, t.kind, t.payload, t.attempt, t.run_at, t.created_at, t.priority, "    \
    "   (SELECT notify_done FROM q), t.packed FROM taken t ORDER BY t.priority, t.run_at, t.id)"

// hopper.jobs alone. A queue with limits, or one that has had packed jobs, takes nothing here; the
// marker's last column tells which.
#define HOPPER_TAKE_SQL(resume_condition)                                                          \
    HOPPER_TAKE_CANDIDATES(resume_condition, "NOT limited AND NOT packed")                         \
    HOPPER_TAKE_DELETE("candidates")                                                               \
    "taken AS (SELECT * FROM deleted), "                                                           \
    HOPPER_TAKE_FINISH("packed AND NOT limited", "limited OR packed")

// The same for a queue that has had packed jobs (include/hopper/batches.hpp): packed rows and
// hopper.jobs merged in pull order; the packed jobs picked go straight to history.
#define HOPPER_PACKED_TAKE_SQL(resume_condition)                                                   \
    HOPPER_TAKE_CANDIDATES(resume_condition, "NOT limited")                                        \
    HOPPER_PACKED_CANDIDATES("$1", "$2", "$4", "$3", "EXISTS (SELECT 1 FROM q WHERE NOT limited)") \
    HOPPER_TAKE_DELETE("picked WHERE batch IS NULL")                                               \
    "taken AS (SELECT * FROM deleted UNION ALL "                                                   \
    "  SELECT k.id, $1::text, p.priority, p.run_at, 1, p.max_attempts, p.created_at, "                                        \
    "    LEAST($2, pg_catalog.clock_timestamp()), p.kind, " \
    "    $5, NULL::text, NULL::text, NULL::text, NULL::jsonb, NULL::jsonb, k.payload, true "       \
    "  FROM picked k JOIN packed p ON p.first_id = k.batch), "                                     \
    HOPPER_TAKE_FINISH("NULL::boolean", "limited")
// clang-format on

// Planned once, walking jobs_pull_idx, for the reasons given at queue_pull's claim statement.
spi::Statement& take_statement() {
    static spi::Statement st(HOPPER_TAKE_SQL(""),
                             {TEXTOID, TIMESTAMPTZOID, INT8OID, TEXTARRAYOID, TEXTOID},
                             CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
    return st;
}

// The same, starting at the queue's claim hint ($6, $7, $8).
spi::Statement& resumed_take_statement() {
    static spi::Statement st(
        HOPPER_TAKE_SQL("AND (priority, run_at, id) >= ($6, $7, $8) "),
        {TEXTOID, TIMESTAMPTZOID, INT8OID, TEXTARRAYOID, TEXTOID, INT2OID, TIMESTAMPTZOID, INT8OID},
        CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
    return st;
}

spi::Statement& packed_take_statement() {
    static spi::Statement st(HOPPER_PACKED_TAKE_SQL(""),
                             {TEXTOID, TIMESTAMPTZOID, INT8OID, TEXTARRAYOID, TEXTOID},
                             CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
    return st;
}

spi::Statement& resumed_packed_take_statement() {
    static spi::Statement st(
        HOPPER_PACKED_TAKE_SQL("AND (priority, run_at, id) >= ($6, $7, $8) "),
        {TEXTOID, TIMESTAMPTZOID, INT8OID, TEXTARRAYOID, TEXTOID, INT2OID, TIMESTAMPTZOID, INT8OID},
        CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
    return st;
}

#undef HOPPER_TAKE_SQL
#undef HOPPER_PACKED_TAKE_SQL
#undef HOPPER_TAKE_CANDIDATES
#undef HOPPER_TAKE_DELETE
#undef HOPPER_TAKE_FINISH

}  // namespace

// queue_take(queue, n, worker, kinds, at, wait) -> setof hopper.taken_job
HOPPER_FUNCTION(hopper_queue_take) {
    std::string queue = args::queue_name(fcinfo, 0);
    int32_t n = args::pull_size(fcinfo, 1);
    auto worker = args::optional_text(fcinfo, 2, "worker", args::kMaxWorker);
    bool kinds_null = args::kinds_absent(fcinfo, 3);
    bool own_clock = !args::is_null(fcinfo, 4);
    TimestampTz at = args::clock(fcinfo, 4, "at");
    int64_t wait_us = pull_wait::wait_us(fcinfo, 5, "queue_take");

    result::SetResult out(fcinfo);
    spi::Connection conn;
    reaper::ensure_running(conn);
    claim_hint::Start hint;
    bool resume = false;
    bool may_raise = false;
    bool packed = batches::seen_packed(queue);

    auto take = [&](int64_t limit) {
        spi::Arg queue_arg = spi::arg_text(queue);
        spi::Arg at_arg = spi::arg_datum(TimestampTzGetDatum(at));
        spi::Arg kinds_arg = spi::arg_datum(kinds_null ? (Datum)0 : PG_GETARG_DATUM(3), kinds_null);
        spi::Arg worker_arg = spi::arg_text(worker);
        if (resume)
            return conn.exec(
                packed ? resumed_packed_take_statement() : resumed_take_statement(),
                {queue_arg, at_arg, spi::arg(limit), kinds_arg, worker_arg,
                 spi::arg_datum(Int16GetDatum(hint.key.priority)),
                 spi::arg_datum(TimestampTzGetDatum(hint.key.run_at)), spi::arg(hint.key.id)});
        return conn.exec(packed ? packed_take_statement() : take_statement(),
                         {queue_arg, at_arg, spi::arg(limit), kinds_arg, worker_arg});
    };
    // As in queue_pull: a take that also took packed jobs leaves the hint be, and one short of n
    // tops up from the next packed rows.
    bool took_packed = false;
    bool took_any_packed = false;  // some take of this call did
    auto add = [&](const spi::Result& r) {
        took_packed = false;
        if (!r.empty() && r.is_null(0, 1) && batches::marks_packed(r, 10, queue)) {
            packed = true;  // nothing taken: the caller takes again with the packed statement
            return uint64_t{0};
        }
        if (!r.empty() && r.is_null(0, 1))
            throw PgError(ERRCODE_FEATURE_NOT_SUPPORTED,
                          "queue \"" + queue + "\" has limits: queue_take cannot count its jobs",
                          "Concurrency and rate limits count running jobs, and a taken job never "
                          "runs under a lease.",
                          "Pull from this queue with queue_pull.");
        for (uint64_t i = 0; i < r.rows(); ++i) {
            out.add_row(r, i);
            // Its "hopper:done", if any, goes out at commit (include/hopper/taken_here.hpp).
            taken_here::remember(r.get_int64(i, 1), queue, r.get_bool(i, 9));
            if (!r.is_null(i, 10) && r.get_bool(i, 10)) took_packed = took_any_packed = true;
        }
        if (!r.empty() && may_raise && !took_packed) {
            uint64_t last = r.rows() - 1;
            claim_hint::claimed(
                hint, {r.get_int16(last, 8), r.get_timestamptz(last, 6), r.get_int64(last, 1)}, at);
        }
        return r.rows();
    };

    // The common case goes straight through the access methods (include/hopper/direct_claim.hpp);
    // nullopt: the statement must do it.
    auto direct = [&](int64_t limit) -> std::optional<uint64_t> {
        if (!kinds_null) return std::nullopt;
        auto t = direct_claim::take({queue, limit, at, resume ? &hint.key : nullptr, worker});
        if (!t) return std::nullopt;
        took_packed = t->took_packed;
        took_any_packed = took_any_packed || took_packed;
        for (auto& row : t->rows) {
            out.add_values(row.values, row.nulls);
            taken_here::remember(row.key.id, queue, t->notify_done);
        }
        if (!t->rows.empty() && may_raise && !took_packed)
            claim_hint::claimed(hint, t->rows.back().key, at);
        return t->rows.size();
    };
    auto take_some = [&](int64_t limit) {
        if (auto got = direct(limit)) return *got;
        return add(take(limit));
    };

    auto attempt = [&]() -> bool {
        // A waiting take judges "due" by the clock at each attempt, as a waiting pull does.
        if (wait_us > 0 && !own_clock) at = GetCurrentTimestamp();
        // Read before the statement takes its snapshot (include/hopper/claim_hint.hpp). A take
        // that rolls back clears the hint, as a claim that rolls back does: its jobs are back
        // below it.
        hint = claim_hint::begin(queue);
        resume = hint.resume;
        may_raise = kinds_null && !own_clock && !IsolationUsesXactSnapshot();
        // With no reaper running, expired leases are taken over before the take, as queue_pull
        // does: a crashed worker's job would otherwise stay running for as long as the queue has
        // other jobs due. With a live reaper this costs one read of its PGPROC. The jobs put back
        // may lie below the hint: the take starts from the front and leaves the hint be.
        rescue::Counts rescued = rescue::before_claim(conn, queue, at, n);
        if (rescued.retried > 0) {
            resume = false;
            may_raise = false;
        }
        bool knew_packed = packed;
        uint64_t got = take_some(n);
        if (!knew_packed && packed) got = take_some(n);
        // Each round that took packed jobs took at least one: the loop ends.
        while (took_packed && got < static_cast<uint64_t>(n))
            got += take_some(n - static_cast<int64_t>(got));
        // Short of n: take over expired leases too, as queue_pull does.
        rescue::Counts short_rescued = rescue::for_short_claim(conn, queue, at, n, got, rescued);
        if (short_rescued.retried > 0) {
            resume = false;
            may_raise = false;
            got += take_some(n - static_cast<int64_t>(got));
        }
        rescued.retried += short_rescued.retried;
        rescued.dead += short_rescued.dead;
        // Jobs rescued and not claimed here (another kind, a full key, or dead) are held by
        // this transaction until it ends: a waiting pull must not sleep on them, or no one else
        // could take them, and their old holder's calls would wait, for the whole wait.
        if (rescued.retried + rescued.dead > 0) return true;
        return got > 0;
    };
    pull_wait::attempt_until_done(queue, wait_us, !kinds_null, attempt);
    if (took_any_packed) batches::wake_after_packed_claim(queue);
    conn.finish();
    return (Datum)0;
}
