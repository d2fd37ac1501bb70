// hopper.queue_set_notify_done(queue, enabled): whether a queue's finished jobs are announced on
// "hopper:done". Off by default, because every notifying commit of a database is serialized (see
// README "LISTEN/NOTIFY"); a queue someone waits on turns it on.
#include "hopper/args.hpp"
#include "hopper/queues.hpp"

extern "C" {
#include "catalog/pg_type.h"
}

using namespace hopper;

HOPPER_FUNCTION(hopper_queue_set_notify_done) {
    std::string queue = args::queue_name(fcinfo, 0);
    if (args::is_null(fcinfo, 1))
        throw PgError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "enabled must not be NULL", {},
                      "Pass true to announce finished jobs on \"hopper:done\", false to stop.");
    bool enabled = PG_GETARG_BOOL(1);
    // The old value comes from the row this statement locked, so two concurrent calls each see
    // the value the other left.
    static spi::Statement st(
        "UPDATE hopper.queues q SET notify_done = $2 FROM (SELECT name, notify_done FROM "
        "hopper.queues WHERE name = $1 FOR UPDATE) old WHERE q.name = old.name "
        "RETURNING old.notify_done",
        {TEXTOID, BOOLOID});
    spi::Connection conn;
    queues::hold(conn, queue);  // a drop in flight first, as queue_pause
    spi::Result r = conn.exec(st, {spi::arg_text(queue), spi::arg_bool(enabled)});
    if (r.empty()) queues::require(conn, queue);
    bool previous = r.get_bool(0, 1);
    conn.finish();
    PG_RETURN_BOOL(previous);
}
