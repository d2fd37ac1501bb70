// Starting reapers on demand: start() registers a dynamic background worker; ensure_running() is
// the cheap check queue_push and queue_pull make. See include/hopper/reaper.hpp.
#include <cstdio>
#include <cstring>

#include "hopper/reaper.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_database.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
}

namespace hopper::reaper {
namespace {

// How often one backend looks for a missing reaper. A reaper that is gone is restarted within
// this long of the next push or pull; a backend that pushes all day pays one check per period.
constexpr int64_t kCheckEveryUs = 5 * USECS_PER_SEC;
TimestampTz last_check = 0;

// Whether reaper_stop() parked the reaper of this database. Read with the caller's rights; a caller
// who may not read the flag starts the worker anyway and lets the reaper read it.
bool parked(spi::Connection& conn) {
    bool readable = pg_guard([] {
        Oid ns = get_namespace_oid("hopper", true);
        Oid rel = OidIsValid(ns) ? get_relname_relid("reaper_control", ns) : InvalidOid;
        return OidIsValid(rel) && pg_class_aclcheck(rel, GetUserId(), ACL_SELECT) == ACLCHECK_OK;
    });
    if (!readable) return false;
    static spi::Statement st("SELECT stopped FROM hopper.reaper_control", {});
    spi::Result r = conn.exec(st, {});
    return !r.empty() && r.get_bool(0, 1);
}

}  // namespace

bool current_database_is_template() {
    return pg_guard([] {
        HeapTuple tup = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(MyDatabaseId));
        if (!HeapTupleIsValid(tup)) return false;
        bool is_template = reinterpret_cast<Form_pg_database>(GETSTRUCT(tup))->datistemplate;
        ReleaseSysCache(tup);
        return is_template;
    });
}

bool start(Oid db, Mode mode, TransactionId wait_for, bool warn, bool patient) {
    // pg_upgrade restores the schema with CREATE EXTENSION: no reaper may touch the data then.
    if (IsBinaryUpgrade) return false;
    // A worker registered during recovery waits for its end (BgWorkerStart_RecoveryFinished): on
    // a hot standby it would keep a worker slot from parallel queries until promotion, and then
    // start along with every other one registered there.
    if (pg_guard([] { return RecoveryInProgress(); })) return false;
    BackgroundWorker w;
    std::memset(&w, 0, sizeof w);
    w.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
    w.bgw_start_time = BgWorkerStart_RecoveryFinished;
    // Never restarted by the postmaster: the launcher or the next push/pull starts a new one, and
    // a reaper that exits because its database has no extension must stay gone.
    w.bgw_restart_time = BGW_NEVER_RESTART;
    snprintf(w.bgw_library_name, BGW_MAXLEN, "hopper");
    snprintf(w.bgw_function_name, BGW_MAXLEN, "hopper_reaper_main");
    snprintf(w.bgw_name, BGW_MAXLEN, "hopper reaper for database %u", db);
    snprintf(w.bgw_type, BGW_MAXLEN, "hopper reaper");
    w.bgw_main_arg = ObjectIdGetDatum(db);
    StartInfo info{mode, patient, wait_for};
    static_assert(sizeof info <= BGW_EXTRALEN, "StartInfo must fit in bgw_extra");
    std::memcpy(w.bgw_extra, &info, sizeof info);
    w.bgw_notify_pid = 0;

    bool ok = pg_guard([&] { return RegisterDynamicBackgroundWorker(&w, nullptr); });
    if (!ok)
        pg_guard([&] {
            ereport(warn ? WARNING : DEBUG1,
                    (errmsg("could not start the hopper reaper for database %u", db),
                     errdetail("No background worker slot is free."),
                     errhint("Raise max_worker_processes; stuck jobs are still rescued by "
                             "queue_pull when their lease ends.")));
        });
    return ok;
}

void ensure_running(spi::Connection& conn) {
    if (!enabled) {
        forget_running();
        return;
    }
    // A read-only transaction (every one on a hot standby) is about to fail with 25006: it starts
    // nothing. Both tests read a backend-local flag once recovery is over.
    if (XactReadOnly || RecoveryInProgress()) return;
    TimestampTz now = GetCurrentTransactionStartTimestamp();
    if (last_check != 0 && now - last_check < kCheckEveryUs && now >= last_check) return;
    last_check = now;
    if (lock_is_held()) {
        // Pushes hand their wake-ups to it until the next check (or until it is seen gone).
        locate_running();
        return;
    }
    forget_running();
    // A reaper is on its way (it holds this lock from its connection to its reaper lock): one
    // start is enough, however many backends find the reaper missing at once.
    if (starting_is_held()) return;
    if (current_database_is_template() || parked(conn)) return;
    // Quietly: a full worker table would otherwise warn on every check of every backend.
    start(MyDatabaseId, preloaded ? Mode::preload : Mode::dynamic, GetTopTransactionIdIfAny(),
          /*warn=*/false);
}

}  // namespace hopper::reaper
