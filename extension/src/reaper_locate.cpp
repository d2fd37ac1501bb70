// Finding this database's reaper process, so that a push can set its latch after commit; see
// include/hopper/reaper.hpp. Without shared_preload_libraries hopper has no shared memory of its
// own, so the reaper is looked up among the server's processes: a background worker of this
// database whose registered type is "hopper reaper".
#include <cstring>

#include "hopper/reaper.hpp"

extern "C" {
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "utils/timestamp.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/procarray.h"
}

namespace hopper::reaper {
namespace {

// The reaper's PGPROC and the pid it had when found. PGPROCs live in shared memory for the life
// of the server; a slot whose pid changed belongs to another process (or none) now.
PGPROC* known_proc = nullptr;
int known_pid = 0;

// A backend that never pushed or pulled (an operator's retry or release from a connection of its
// own) has not looked for the reaper; without a look its wake-ups would go out as its own NOTIFY,
// taking the commit lock the relay spares. It looks when it needs to, once in a few seconds.
constexpr int64_t kLookEveryUs = 5 * USECS_PER_SEC;
TimestampTz last_look = 0;

void look_if_due() {
    if (!enabled) return;
    TimestampTz now = GetCurrentTimestamp();
    if (last_look != 0 && now >= last_look && now - last_look < kLookEveryUs) return;
    last_look = now;
    if (lock_is_held()) locate_running();
}

bool is_reaper_of_this_database(PGPROC* proc, int pid) {
    if (pid == 0 || proc->databaseId != MyDatabaseId || !proc->isBackgroundWorker) return false;
    const char* type = pg_guard([&] { return GetBackgroundWorkerTypeByPid(pid); });
    return type != nullptr && std::strcmp(type, "hopper reaper") == 0;
}

}  // namespace

void locate_running() {
    if (known_alive() && is_reaper_of_this_database(known_proc, known_pid)) return;
    forget_running();
    // A scan of the process table without its lock: a slot read while it changes hands yields a
    // pid that the background worker registry (read under its lock) does not confirm. Once in a
    // few seconds per backend at most, and only when the reaper changed.
    uint32 n = ProcGlobal->allProcCount;
    for (uint32 i = 0; i < n; ++i) {
        PGPROC* proc = &ProcGlobal->allProcs[i];
        int pid = proc->pid;
        if (!is_reaper_of_this_database(proc, pid)) continue;
        known_proc = proc;
        known_pid = pid;
        return;
    }
}

void forget_running() {
    known_proc = nullptr;
    known_pid = 0;
}

bool known_alive() {
    return known_proc != nullptr && known_proc->pid == known_pid;
}

bool still_running() {
    if (known_proc == nullptr) look_if_due();
    if (known_proc == nullptr) return false;
    bool live = pg_guard([] { return BackendPidGetProc(known_pid) == known_proc; });
    if (!live) forget_running();
    return live;
}

void wake_known() noexcept {
    // The pid is tested again just before: a reaper that exited since has no latch to set. Should
    // its slot be reused by the very same pid meanwhile, the latch of that process is set, which
    // every latch waiter must tolerate (a spurious wake-up).
    if (known_alive()) SetLatch(&known_proc->procLatch);
}

}  // namespace hopper::reaper
