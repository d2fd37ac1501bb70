// Periodic jobs: queue_schedule creates or replaces a schedule, queue_unschedule removes one.
#include "hopper/args.hpp"
#include "hopper/queues.hpp"
#include "hopper/schedule.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/timestamp.h"
}

using namespace hopper;

namespace {

std::string schedule_name(FunctionCallInfo fcinfo, int n) {
    return args::required_text(fcinfo, n, "name", schedule::kMaxName);
}

}  // namespace

HOPPER_FUNCTION(hopper_queue_schedule) {
    std::string name = schedule_name(fcinfo, 0);
    std::string cron = args::required_text(fcinfo, 1, "cron", 1000);
    std::string queue = args::queue_name(fcinfo, 2);
    Datum payload = args::payload(fcinfo, 3);
    auto kind = args::optional_text(fcinfo, 4, "kind", args::kMaxKind);
    int16_t priority = args::priority(fcinfo, 5);
    auto max_attempts = args::max_attempts(fcinfo, 6);
    auto parsed = schedule::parse(cron);

    spi::Connection conn;
    // As a push does: a drop in flight is waited for, and the queue made again after it (its
    // schedules went with it), rather than a foreign key error at the drop's commit.
    queues::hold(conn, queue);
    queues::ensure(conn, queue);
    // A run of the schedule in flight is waited for here, not in the upsert: the next run below
    // must be reckoned after every wait. Reckoned before one, a tick that came and was run
    // meanwhile would be the replaced schedule's next run and run again, for a new queue where
    // its dedup key does not reach.
    static spi::Statement lock_row("SELECT name FROM hopper.schedules WHERE name = $1 FOR UPDATE",
                                   {TEXTOID});
    conn.exec(lock_row, {spi::arg_text(name)});
    // From the real time, not the transaction's start: a schedule declared in a transaction that
    // began before a tick would be due at that tick, run at once for a time before its making.
    TimestampTz next = schedule::next_after(parsed, cron, GetCurrentTimestamp());
    // Replacing keeps last_run_at: the history of the name, not of one version of it. With the
    // same cron expression it keeps next_run_at too: an application that declares its schedules
    // whenever it starts must not drop a tick that is due (or missed) at that moment.
    static spi::Statement upsert(
        "INSERT INTO hopper.schedules AS s (name, cron, queue, payload, kind, priority, "
        "max_attempts, next_run_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
        "ON CONFLICT (name) DO UPDATE SET cron = EXCLUDED.cron, queue = EXCLUDED.queue, "
        "payload = EXCLUDED.payload, kind = EXCLUDED.kind, priority = EXCLUDED.priority, "
        "max_attempts = EXCLUDED.max_attempts, "
        "next_run_at = CASE WHEN s.cron = EXCLUDED.cron THEN s.next_run_at "
        "  ELSE EXCLUDED.next_run_at END, "
        "updated_at = pg_catalog.now() RETURNING next_run_at",
        {TEXTOID, TEXTOID, TEXTOID, JSONBOID, TEXTOID, INT2OID, INT4OID, TIMESTAMPTZOID});
    spi::Result r =
        conn.exec(upsert, {spi::arg_text(name), spi::arg_text(cron), spi::arg_text(queue),
                           spi::arg_datum(payload), spi::arg_text(kind),
                           spi::arg_datum(Int16GetDatum(priority)),
                           max_attempts ? spi::arg_int4(*max_attempts) : spi::null_arg(),
                           spi::arg_datum(TimestampTzGetDatum(next))});
    TimestampTz next_run = r.get_timestamptz(0, 1);
    conn.finish();
    PG_RETURN_TIMESTAMPTZ(next_run);
}

HOPPER_FUNCTION(hopper_queue_unschedule) {
    std::string name = schedule_name(fcinfo, 0);
    spi::Connection conn;
    static spi::Statement st("DELETE FROM hopper.schedules WHERE name = $1 RETURNING name",
                             {TEXTOID});
    bool existed = !conn.exec(st, {spi::arg_text(name)}).empty();
    conn.finish();
    PG_RETURN_BOOL(existed);
}
