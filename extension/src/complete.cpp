// Workers: queue_complete moves a job it still holds to history as completed.
#include "hopper/args.hpp"
#include "hopper/direct_complete.hpp"
#include "hopper/jobs.hpp"
#include "hopper/notify.hpp"
#include "hopper/sql.hpp"

extern "C" {
#include "catalog/pg_type.h"
}

using namespace hopper;

HOPPER_FUNCTION(hopper_queue_complete) {
    int64_t id = args::job_id(fcinfo, 0);
    int64_t token = args::lease_token(fcinfo, 1);
    bool result_null = args::is_null(fcinfo, 2);

    // Straight through the access methods when it can (include/hopper/direct_complete.hpp).
    Datum result = result_null ? (Datum)0 : PG_GETARG_DATUM(2);
    auto direct = direct_complete::complete({{id, token, result, result_null}});
    if (direct && (*direct)[0].done) {
        notify::job_done(id, (*direct)[0].queue, "completed", (*direct)[0].notify_done);
        if ((*direct)[0].limited) notify::slot_freed((*direct)[0].queue);
        PG_RETURN_BOOL(true);
    }
    if (direct) {
        // No running job holds this token: P0002 for an unknown id, otherwise the lease was lost.
        spi::Connection conn;
        jobs::require_known(conn, id);
        conn.finish();
        PG_RETURN_BOOL(false);
    }

    // The fencing check is the WHERE clause: only the current lease's token matches.
    static spi::Statement st(
        "WITH done AS (DELETE FROM hopper.jobs WHERE id = $1 AND lease_token = $2 "
        "  AND state OPERATOR(pg_catalog.=) 'running' "
        "    RETURNING *), kept AS (" HOPPER_HISTORY_INSERT HOPPER_HISTORY_SELECT("d")
        "1.0::real, d.last_error, d.errors, d.progress_detail, d.payload, 'completed', "
        HOPPER_FINISHED_AT("d", "pg_catalog.now()") ", $3 FROM done d WHERE " HOPPER_QUEUE_KEEPS_HISTORY("d") ") "
        "SELECT d.queue, " HOPPER_QUEUE_NOTIFIES_DONE("d") ", " HOPPER_QUEUE_LIMITED("d") " FROM done d",
        {INT8OID, INT8OID, JSONBOID}, spi::Planning::kWalkIndexes);
    spi::Connection conn;
    spi::Result r =
        conn.exec(st, {spi::arg(id), spi::arg(token), spi::arg_datum(result, result_null)});
    bool done = !r.empty();
    if (done) {
        notify::job_done(id, r.get_text(0, 1), "completed", r.get_bool(0, 2));
        if (r.get_bool(0, 3)) notify::slot_freed(r.get_text(0, 1));
    } else {
        jobs::require_known(conn, id);  // P0002 for an unknown id; otherwise the lease was lost
    }
    conn.finish();
    PG_RETURN_BOOL(done);
}
