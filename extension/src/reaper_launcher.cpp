// The launcher of a preloaded server: a background worker connected to no database that starts a
// reaper in every database which has none. It cannot see which databases have the extension
// (only shared catalogs are readable without a database), so the reaper it starts checks and exits
// where the extension is absent; such databases are retried only every kRetryAbsentUs.
// CREATE EXTENSION does not wait for it: the install script starts its reaper itself.
#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <vector>

#include "hopper/reaper.hpp"
#include "hopper/worker_txn.hpp"

extern "C" {
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

PGDLLEXPORT void hopper_reaper_launcher_main(Datum main_arg);
}

namespace hopper::reaper {
namespace {

// How often the launcher looks at the databases and their reapers.
constexpr int kScanEveryMs = 10000;
// How often it retries a database whose last reaper went away without ever being seen running:
// usually one without the extension.
constexpr int64_t kRetryAbsentUs = 60 * USECS_PER_SEC;

struct Database {
    Oid oid;
    TimestampTz last_start;  // 0: never started one
    bool seen_running;       // its reaper was running at some scan since the last start
    bool ever_running;       // a reaper was seen running there once: it has the extension
};

// Survives a longjmp into the main loop (a static, not a local of main).
std::vector<Database>* databases = nullptr;

// Databases a reaper may connect to: not templates (a connection to a template blocks CREATE
// DATABASE), not refusing connections, not half-dropped.
std::vector<Oid> connectable_databases() {
    List* oids = pg_guard([] {
        List* out = NIL;
        Relation rel = table_open(DatabaseRelationId, AccessShareLock);
        TableScanDesc scan = table_beginscan_catalog(rel, 0, nullptr);
        HeapTuple tup;
        while ((tup = heap_getnext(scan, ForwardScanDirection)) != nullptr) {
            auto* db = reinterpret_cast<Form_pg_database>(GETSTRUCT(tup));
            if (db->datallowconn && !db->datistemplate && !database_is_invalid_form(db))
                out = lappend_oid(out, db->oid);
        }
        table_endscan(scan);
        table_close(rel, AccessShareLock);
        return out;
    });
    std::vector<Oid> result;
    ListCell* lc;
    foreach (lc, oids) result.push_back(lfirst_oid(lc));
    return result;
}

void scan() {
    std::vector<Oid> oids;
    std::vector<Oid> served;
    // Of those, the reapers that found the extension: one still checking (as a start of this
    // launcher may be when the wake-up of another makes it scan) says nothing yet.
    std::vector<Oid> running;
    worker::in_transaction([&] {
        oids = connectable_databases();
        for (const Process& p : processes()) {
            served.push_back(p.database);
            if (p.active) running.push_back(p.database);
        }
    });
    // Forget dropped databases.
    databases->erase(std::remove_if(databases->begin(), databases->end(),
                                    [&](const Database& d) {
                                        return std::find(oids.begin(), oids.end(), d.oid) ==
                                               oids.end();
                                    }),
                     databases->end());
    TimestampTz now = GetCurrentTimestamp();
    bool slots_full = false;
    for (Oid oid : oids) {
        auto it = std::find_if(databases->begin(), databases->end(),
                               [&](const Database& d) { return d.oid == oid; });
        if (it == databases->end()) {
            databases->push_back({oid, 0, false, false});
            it = databases->end() - 1;
        }
        if (std::find(served.begin(), served.end(), oid) != served.end()) {
            if (std::find(running.begin(), running.end(), oid) != running.end()) {
                it->seen_running = true;
                it->ever_running = true;
            }
            continue;
        }
        // A reaper that was running and is gone (crashed, say) is replaced at once; a database
        // whose reaper never got going is retried now and then.
        bool due =
            it->last_start == 0 || it->seen_running || now - it->last_start >= kRetryAbsentUs;
        if (!due || slots_full) continue;
        // Warned only where the extension is known to be: most databases tried have none.
        if (!start(oid, Mode::preload, InvalidTransactionId, /*warn=*/it->ever_running)) {
            // No slot: the starts still due this scan would fail alike. They stay due, not
            // counted as tried, for the next scan, when this scan's short-lived checks (reapers
            // that find no extension) have left: counted, the same databases (those late in
            // pg_database) lost every round, every minute, and never got a reaper.
            slots_full = true;
            continue;
        }
        it->last_start = now;
        it->seen_running = false;
    }
}

void guarded_scan() {
    bool failed = false;
    try {
        if (ConfigReloadPending) {
            ConfigReloadPending = false;
            pg_guard([] { ProcessConfigFile(PGC_SIGHUP); });
        }
        if (enabled) scan();
    } catch (...) {
        worker::remember_failure();
        failed = true;
    }
    if (failed) worker::report_failure("hopper reaper launcher scan");
}

}  // namespace

void register_launcher() {
    BackgroundWorker w;
    std::memset(&w, 0, sizeof w);
    w.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
    w.bgw_start_time = BgWorkerStart_RecoveryFinished;
    w.bgw_restart_time = 10;  // seconds; after a crash
    snprintf(w.bgw_library_name, BGW_MAXLEN, "hopper");
    snprintf(w.bgw_function_name, BGW_MAXLEN, "hopper_reaper_launcher_main");
    snprintf(w.bgw_name, BGW_MAXLEN, "hopper reaper launcher");
    snprintf(w.bgw_type, BGW_MAXLEN, "hopper reaper launcher");
    RegisterBackgroundWorker(&w);
}

}  // namespace hopper::reaper

void hopper_reaper_launcher_main(Datum main_arg) {
    using namespace hopper::reaper;
    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    pqsignal(SIGTERM, die);
    BackgroundWorkerUnblockSignals();
    BackgroundWorkerInitializeConnection(nullptr, nullptr, 0);

    static std::vector<Database> known;
    databases = &known;

    sigjmp_buf local_sigjmp_buf;
    if (sigsetjmp(local_sigjmp_buf, 1) != 0) {
        hopper::reaper::recover_after_error();
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, kScanEveryMs,
                        PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
    }
    PG_exception_stack = &local_sigjmp_buf;

    for (;;) {
        CHECK_FOR_INTERRUPTS();
        guarded_scan();
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, kScanEveryMs,
                        PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
    }
}
