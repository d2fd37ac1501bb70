// Finding reapers and reading their statistics from the backend status table, and the SQL
// function hopper.reaper_status(). Without preload hopper has no shared memory of its own, so a
// reaper publishes itself through its own pg_stat_activity entry: application_name names its mode
// once it holds the lock, the activity text carries its counters.
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "hopper/reaper.hpp"
#include "hopper/result.hpp"

extern "C" {
#include "commands/dbcommands.h"
#include "postmaster/bgworker.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "utils/backend_status.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
}

namespace hopper::reaper {
namespace {

constexpr const char* kActivityFormat =
    "hopper reaper: rescued=%" PRIu64 " pruned=%" PRIu64 " last_run_us=%" PRId64;

bool is_worker_of_type(const PgBackendStatus* b, const char* wanted) {
    if (b->st_procpid <= 0 || b->st_backendType != B_BG_WORKER) return false;
    const char* type = pg_guard([&] { return GetBackgroundWorkerTypeByPid(b->st_procpid); });
    return type != nullptr && std::strcmp(type, wanted) == 0;
}

bool is_reaper_worker(const PgBackendStatus* b) {
    return is_worker_of_type(b, "hopper reaper");
}

}  // namespace

std::string activity_text(TimestampTz last_run, uint64_t rescued, uint64_t pruned) {
    char buf[160];
    snprintf(buf, sizeof buf, kActivityFormat, rescued, pruned, static_cast<int64_t>(last_run));
    return buf;
}

std::vector<Process> processes() {
    std::vector<Process> out;
    int n = pg_guard([] { return pgstat_fetch_stat_numbackends(); });
    for (int i = 1; i <= n; ++i) {
        LocalPgBackendStatus* local = pg_guard([&] { return pgstat_fetch_stat_local_beentry(i); });
        if (local == nullptr) continue;
        const PgBackendStatus* b = &local->backendStatus;
        if (!is_reaper_worker(b)) continue;
        Process p{b->st_procpid, b->st_databaseid, Mode::dynamic, false, 0, 0, 0};
        size_t prefix = std::strlen(kAppNamePrefix);
        if (b->st_appname != nullptr && std::strncmp(b->st_appname, kAppNamePrefix, prefix) == 0) {
            p.active = true;
            p.mode =
                std::strcmp(b->st_appname + prefix, "preload") == 0 ? Mode::preload : Mode::dynamic;
        }
        uint64_t rescued = 0, pruned = 0;
        int64_t last_run = 0;
        if (b->st_activity_raw != nullptr &&
            std::sscanf(b->st_activity_raw, kActivityFormat, &rescued, &pruned, &last_run) == 3) {
            p.rescued = rescued;
            p.pruned = pruned;
            p.last_run = static_cast<TimestampTz>(last_run);
        }
        out.push_back(p);
    }
    return out;
}

void wake_launcher() {
    int n = pg_guard([] { return pgstat_fetch_stat_numbackends(); });
    for (int i = 1; i <= n; ++i) {
        LocalPgBackendStatus* local = pg_guard([&] { return pgstat_fetch_stat_local_beentry(i); });
        if (local == nullptr || !is_worker_of_type(&local->backendStatus, "hopper reaper launcher"))
            continue;
        int pid = local->backendStatus.st_procpid;
        pg_guard([&] {
            // Looked up again under the lock that keeps its PGPROC its own: an exited launcher's
            // slot may serve another process, whose latch must not be set for nothing.
            LWLockAcquire(ProcArrayLock, LW_SHARED);
            PGPROC* proc = BackendPidGetProcWithLock(pid);
            if (proc != nullptr) SetLatch(&proc->procLatch);
            LWLockRelease(ProcArrayLock);
        });
        return;
    }
}

}  // namespace hopper::reaper

using namespace hopper;

// One row per running reaper of the server, whatever database it serves.
HOPPER_FUNCTION(hopper_reaper_status) {
    result::SetResult out(fcinfo);
    for (const reaper::Process& p : reaper::processes()) {
        if (!p.active) continue;
        char* dbname = pg_guard([&] { return get_database_name(p.database); });
        if (dbname == nullptr) continue;  // dropped just now
        Datum values[6];
        bool nulls[6] = {false, false, false, false, false, false};
        values[0] = Int32GetDatum(p.pid);
        values[1] = spi::arg_text(dbname).value;
        values[2] = spi::arg_text(reaper::mode_name(p.mode)).value;
        values[3] = TimestampTzGetDatum(p.last_run);
        nulls[3] = p.last_run == 0;
        values[4] = Int64GetDatum(static_cast<int64_t>(p.rescued));
        values[5] = Int64GetDatum(static_cast<int64_t>(p.pruned));
        out.add_values(values, nulls);
    }
    return (Datum)0;
}
