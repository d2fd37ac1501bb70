// Running due schedules: hopper.schedule_run_due() and the reaper's pass. See
// include/hopper/schedule.hpp.
//
// Exactly one job per tick, in two layers. The schedule row is locked (SKIP LOCKED: a second
// runner goes on with other schedules instead of waiting) and next_run_at moves past the tick in
// the transaction that pushes the job, so a runner that comes later finds it not due. And the job
// carries the dedup key schedule:<name>:<tick>, with a window reaching back past the tick, so even
// a runner that does see the tick again (next_run_at put back by hand, a schedule re-created for
// the same minute) gets the tick's job back, finished or not, instead of a second one.
//
// Each push runs as the schedule's owner, the role that wrote it: the reaper is a superuser, and
// row level security on hopper.jobs and the triggers there must see the role whose job it is. The
// owner is a role's OID: a rename keeps the schedule its role's, and a dropped role's schedule is
// never run as a role made later under its name. A superuser's run that finds the role dropped
// clears the owner, with a WARNING: the schedule is then left out of the runs (and reported once,
// not at every pass of the reaper) until a superuser gives it to a role.
#include <vector>

#include "hopper/args.hpp"
#include "hopper/as_owner.hpp"
#include "hopper/push.hpp"
#include "hopper/queues.hpp"
#include "hopper/schedule.hpp"
#include "hopper/subtransaction.hpp"

extern "C" {
#include "access/detoast.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
}

namespace hopper::schedule {
namespace {

constexpr int64_t kUnixEpochInPg = int64_t(946684800);
constexpr int64_t kDayUs = int64_t(86400) * USECS_PER_SEC;

struct Due {
    std::string name;
    std::string cron;
    std::string queue;
    Datum payload;
    std::optional<std::string> kind;
    int16_t priority;
    std::optional<int32_t> max_attempts;
    TimestampTz next_run_at;
    Oid owner;
};

int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// A tick as its dedup key writes it: Unix seconds, as trim_scale(extract(epoch FROM tick)) does.
// A tick on a whole second (every cron tick) has no decimals; a next_run_at set by hand between
// two keeps its fraction, so that two of them within one second are two ticks, not one key.
std::string tick_key(TimestampTz tick) {
    // Whole seconds and the microseconds after them, each in range for every timestamp (the
    // epoch added in microseconds overflowed int64 past the year 294247).
    int64_t fraction = tick % USECS_PER_SEC;
    if (fraction < 0) fraction += USECS_PER_SEC;
    int64_t seconds = floor_div(tick, USECS_PER_SEC) + kUnixEpochInPg;
    auto digits = [](int64_t us) {
        std::string d = std::to_string(us);
        d.insert(0, 6 - d.size(), '0');
        d.erase(d.find_last_not_of('0') + 1);
        return d;
    };
    if (fraction == 0) return std::to_string(seconds);
    // Before the epoch, -1.5 is seconds -2 and half a second.
    if (seconds < 0)
        return "-" + std::to_string(-(seconds + 1)) + "." + digits(USECS_PER_SEC - fraction);
    return std::to_string(seconds) + "." + digits(fraction);
}

// Only the schedules the runner may run (pg_has_role: every one for a superuser): a producer's
// run that locked another role's schedule, only to leave it, held it from the reaper and every
// other runner (SKIP LOCKED) until its transaction ended.
std::vector<Due> lock_due(spi::Connection& conn, TimestampTz at, int64_t limit,
                          const Cursor* after) {
#define HOPPER_LOCK_DUE(past)                                                        \
    "SELECT name, cron, queue, payload, kind, priority, max_attempts, next_run_at, " \
    "owner::pg_catalog.oid "                                                         \
    "FROM hopper.schedules WHERE next_run_at <= $1 AND owner IS NOT NULL "           \
    "  AND pg_catalog.pg_has_role(owner::pg_catalog.oid, 'USAGE') " past             \
    "ORDER BY next_run_at, name LIMIT $2 "                                           \
    "FOR UPDATE SKIP LOCKED"
    static spi::Statement first(HOPPER_LOCK_DUE(""), {TIMESTAMPTZOID, INT8OID});
    static spi::Statement next(
        HOPPER_LOCK_DUE("AND next_run_at >= $3 AND (next_run_at, name) > ($3, $4) "),
        {TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID, TEXTOID});
#undef HOPPER_LOCK_DUE
    spi::Arg at_arg = spi::arg_datum(TimestampTzGetDatum(at));
    spi::Arg limit_arg = limit > 0 ? spi::arg(limit) : spi::null_arg();
    spi::Result r = after != nullptr && after->started
                        ? conn.exec(next, {at_arg, limit_arg,
                                           spi::arg_datum(TimestampTzGetDatum(after->next_run_at)),
                                           spi::arg_text(after->name)})
                        : conn.exec(first, {at_arg, limit_arg});
    std::vector<Due> due;
    for (uint64_t i = 0; i < r.rows(); ++i) {
        bool isnull = false;
        Due d;
        d.name = r.get_text(i, 1);
        d.cron = r.get_text(i, 2);
        d.queue = r.get_text(i, 3);
        d.payload = r.datum(i, 4, &isnull);
        if (!r.is_null(i, 5)) d.kind = r.get_text(i, 5);
        d.priority = DatumGetInt16(r.datum(i, 6, &isnull));
        if (!r.is_null(i, 7)) d.max_attempts = r.get_int32(i, 7);
        d.next_run_at = DatumGetTimestampTz(r.datum(i, 8, &isnull));
        d.owner = DatumGetObjectId(r.datum(i, 9, &isnull));
        due.push_back(std::move(d));
    }
    return due;
}

// The tick to run: the latest matching time in [next_run_at, at]. Ticks missed while nobody ran
// the schedule are not made up one by one: they collapse into this one. A next_run_at set by hand
// between ticks is a tick of its own.
TimestampTz tick_of(const cron::Schedule& s, const Due& d, TimestampTz at) {
    // Whole seconds: matches are whole minutes, t >= next_run_at <=> t > ceil(next_run_at) - 1.
    int64_t floor_s = floor_div(d.next_run_at + USECS_PER_SEC - 1, USECS_PER_SEC) - 1;
    int64_t at_s = floor_div(at, USECS_PER_SEC);
    auto t = cron::last_at_or_before(s, floor_s + kUnixEpochInPg, at_s + kUnixEpochInPg);
    return t ? (*t - kUnixEpochInPg) * USECS_PER_SEC : d.next_run_at;
}

// Whether job ids would be issued again: a pg_restore that is not one transaction copies the
// tables' rows before it sets hopper.job_id_seq (after all table data, the application's too), and
// the database's reaper starts with CREATE EXTENSION. A periodic job pushed in between took an id
// the source database had issued: to a job restored here (the push then failed on the primary
// key), to a finished one whose history is not in the dump but may be carried over, or that an
// application's table holds. Hence: the sequence behind the ids stored (each table's highest id
// through its primary key, a descent per history partition; the schedules' last jobs), or a
// pg_restore connected while the sequence has issued nothing yet (its application_name, which
// anyone may take: it counts only in the window a restore leaves, so that it cannot hold a live
// database's schedules).
bool restoring(spi::Connection& conn) {
    static spi::Statement st(
        "SELECT COALESCE(GREATEST((SELECT pg_catalog.max(id) FROM hopper.jobs), "
        "    (SELECT pg_catalog.max(id) FROM hopper.job_history), "
        "    (SELECT pg_catalog.max(first_id) FROM hopper.job_batches), "
        "    (SELECT pg_catalog.max(last_job_id) FROM hopper.schedules)) > "
        "    (SELECT CASE WHEN s.is_called THEN s.last_value ELSE s.last_value - 1 END "
        "     FROM hopper.job_id_seq s), false) "
        "  OR (NOT (SELECT s.is_called FROM hopper.job_id_seq s) "
        "    AND EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a "
        "      WHERE a.datname OPERATOR(pg_catalog.=) pg_catalog.current_database() "
        "        AND a.application_name OPERATOR(pg_catalog.=) 'pg_restore' "
        "        AND a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()))",
        {}, spi::Planning::kWalkIndexes);
    return conn.exec(st, {}).get_bool(0, 1);
}

}  // namespace

RunCounts run_due(spi::Connection& conn, TimestampTz at, int64_t limit, Cursor* after,
                  bool hold_while_restoring) {
    RunCounts counts{0, 0, 0};
    TimestampTz now = GetCurrentTransactionStartTimestamp();
    static spi::Statement advance(
        "UPDATE hopper.schedules SET next_run_at = $2, last_run_at = $3, last_job_id = $4 "
        "WHERE name = $1",
        {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID});
    static spi::Statement disown("UPDATE hopper.schedules SET owner = NULL WHERE name = $1",
                                 {TEXTOID});
    std::vector<Due> due = lock_due(conn, at, limit, after);
    if (hold_while_restoring && !due.empty()) {
        // The schedules stay due, and run at the first pass after the restore. Logged when the
        // hold begins and when it ends.
        static bool holding = false;
        const bool hold = restoring(conn);
        if (hold != holding)
            pg_guard([&] {
                ereport(LOG, (hold ? errmsg("hopper reaper: periodic jobs wait while a restore is "
                                            "under way (hopper.job_id_seq is behind the ids "
                                            "stored, or a pg_restore is connected before it set "
                                            "the sequence)")
                                   : errmsg("hopper reaper: periodic jobs run again")));
            });
        holding = hold;
        if (hold) return counts;
    }
    Oid runner = pg_guard([] { return GetUserId(); });
    bool runner_is_superuser = pg_guard([&] { return superuser_arg(runner); });
    counts.locked = due.size();
    if (after != nullptr && !due.empty()) {
        after->started = true;
        after->next_run_at = due.back().next_run_at;
        after->name = due.back().name;
    }
    for (const Due& d : due) {
        // Each schedule in a subtransaction: one whose push fails (a trigger or constraint of
        // the operator's on hopper.jobs) is reported and left due, and the others run. Before,
        // its failure undid the whole batch, and it sorted first again at every pass.
        std::optional<PgError> failed = in_subtransaction([&] {
            Oid owner = d.owner;
            if (!pg_guard(
                    [&] { return SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(owner)); })) {
                // Dropped (DROP ROLE cannot see rows). Only a superuser may clear the owner (a
                // producer may not write it): a producer's run leaves it to the reaper.
                if (!runner_is_superuser) return;
                conn.exec(disown, {spi::arg_text(d.name)});
                pg_guard([&] {
                    ereport(WARNING,
                            (errcode(ERRCODE_UNDEFINED_OBJECT),
                             errmsg("schedule \"%s\" (queue \"%s\") no longer runs: its owner "
                                    "was dropped",
                                    d.name.c_str(), d.queue.c_str()),
                             errdetail("Its owner was the role with OID %u.", owner),
                             errhint("A superuser gives it to a role (UPDATE hopper.schedules "
                                     "SET owner = ...) or drops it (hopper.queue_unschedule).")));
                });
                return;
            }
            // A runner that is not a superuser runs only the schedules of roles whose rights it
            // has (its own): running another's, its session (search_path, settings) would be
            // around that role's triggers. The others are left to the reaper.
            if (!pg_guard([&] { return has_privs_of_role(runner, owner); })) return;
            // A drop of the queue in flight deletes this schedule once this transaction lets
            // its row go; it stays due if the drop rolls back.
            if (!queues::hold(conn, d.queue, /*wait=*/false)) return;
            // hopper.schedules' checks cannot read hopper.max_payload_bytes: a row written by
            // hand may hold a payload queue_schedule refuses. Its size as stored uncompressed,
            // without reading the value in.
            args::check_payload_size(pg_guard([&] { return toast_raw_datum_size(d.payload); }),
                                     "payload");
            cron::Schedule s = parse(d.cron);
            TimestampTz tick = tick_of(s, d, at);
            TimestampTz next = next_after(s, d.cron, at);

            push::Job job;
            job.queue = d.queue;
            job.payload = d.payload;
            job.priority = d.priority;
            job.kind = d.kind;
            job.max_attempts = d.max_attempts;
            job.dedup_key = "schedule:" + d.name + ":" + tick_key(tick);
            // Back to a day before the tick: the tick's job was created at the tick or later.
            job.dedup_window_us = (now > tick ? now - tick : 0) + kDayUs;
            push::Pushed pushed{};
            {
                AsOwner as_owner(owner);
                pushed = push::one(conn, job);
            }

            conn.exec(advance, {spi::arg_text(d.name), spi::arg_datum(TimestampTzGetDatum(next)),
                                spi::arg_datum(TimestampTzGetDatum(tick)), spi::arg(pushed.id)});
            counts.due += 1;
            counts.pushed += pushed.inserted ? 1 : 0;
        });
        if (failed)
            pg_guard([&] {
                ereport(WARNING,
                        (errcode(failed->sqlstate()),
                         errmsg("periodic job of schedule \"%s\" (queue \"%s\") failed: %s",
                                d.name.c_str(), d.queue.c_str(), failed->what()),
                         errhint("The schedule stays due and is tried again at the next run.")));
            });
    }
    return counts;
}

}  // namespace hopper::schedule

using namespace hopper;

HOPPER_FUNCTION(hopper_schedule_run_due) {
    TimestampTz at = args::clock(fcinfo, 0, "at");
    // Running schedules ahead moves each one's next run past `at` for good (re-declaring it
    // keeps that): a producer's mistyped date would silence every schedule of the database.
    if (at > GetCurrentTransactionStartTimestamp() && !pg_guard([] { return superuser(); }))
        throw PgError(ERRCODE_INSUFFICIENT_PRIVILEGE,
                      "only a superuser may run schedules ahead of time",
                      "Each schedule's next run would move past the time given, for good.",
                      "Call schedule_run_due() without at, or with a time not after now().");
    spi::Connection conn;
    schedule::RunCounts c = schedule::run_due(conn, at, 0);
    conn.finish();
    PG_RETURN_INT32(static_cast<int32_t>(c.pushed));
}
