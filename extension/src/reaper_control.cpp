// hopper.reaper_start() and hopper.reaper_stop(): park and unpark this database's reaper. The
// parked state lives in hopper.reaper_control, so neither the launcher nor a push or pull brings a
// stopped reaper back until reaper_start().
#include <csignal>

#include "hopper/reaper.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
}

using namespace hopper;

namespace {

// How long reaper_stop() waits for the reaper to let go of its lock. A reaper exits at its next
// interrupt check, which a pass makes between every two batches.
constexpr int kStopWaitMs = 10000;

void set_stopped(bool stopped) {
    spi::Connection conn;
    static spi::Statement st(
        "UPDATE hopper.reaper_control SET stopped = $1, changed_at = pg_catalog.now()", {BOOLOID});
    conn.exec(st, {spi::arg_bool(stopped)});
    conn.finish();
}

}  // namespace

// Returns true if a reaper was asked to start, false if one already runs here, the reaper is
// disabled server-wide (hopper.reaper_enabled = off) or the database is a template.
HOPPER_FUNCTION(hopper_reaper_start) {
    set_stopped(false);
    if (!reaper::enabled || reaper::current_database_is_template()) PG_RETURN_BOOL(false);
    bool running = reaper::lock_is_held();
    // The new reaper waits for this transaction: it may be the one creating the extension, and it
    // holds the reaper_control row the reaper reads.
    TransactionId xid = pg_guard([] { return GetTopTransactionId(); });
    // Started even when a reaper holds the lock: that one may be on its way out (DROP EXTENSION
    // and at once CREATE EXTENSION: its next pass, before this transaction commits, finds no
    // extension). The new one keeps trying for the lock a few seconds and leaves if it stays.
    bool ok = reaper::start(MyDatabaseId,
                            reaper::preloaded ? reaper::Mode::preload : reaper::Mode::dynamic, xid,
                            /*warn=*/!running, /*patient=*/true);
    PG_RETURN_BOOL(ok && !running);
}

// Returns true if a running reaper was stopped. Waits until it has exited (at most 10 s), so that
// DROP DATABASE may follow at once.
HOPPER_FUNCTION(hopper_reaper_stop) {
    set_stopped(true);
    bool was_running = false;
    for (int waited = 0; waited < kStopWaitMs; waited += 20) {
        // Signals every reaper process of this database, again on each round: one started by a
        // push or the launcher meanwhile (it cannot see the uncommitted stop yet) goes too,
        // rather than waiting for this transaction while this transaction waits for it.
        pg_guard([] { pgstat_clear_snapshot(); });
        bool any = false;
        for (const reaper::Process& p : reaper::processes()) {
            if (p.database != MyDatabaseId) continue;
            any = true;
            if (waited == 0) was_running = was_running || p.active;
            // A reaper stops on SIGTERM at its next interrupt check (die()).
            kill(p.pid, SIGTERM);
        }
        if (!any && !reaper::lock_is_held()) PG_RETURN_BOOL(was_running);
        pg_guard([] {
            (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 20,
                            PG_WAIT_EXTENSION);
            ResetLatch(MyLatch);
            CHECK_FOR_INTERRUPTS();
        });
    }
    throw PgError(ERRCODE_OBJECT_IN_USE,
                  "the hopper reaper of this database did not stop within 10 s", {},
                  "Look for it in pg_stat_activity (backend_type 'hopper reaper').");
}
