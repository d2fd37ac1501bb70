// The reaper: one background worker per database that rescues stuck jobs, prunes history and wakes
// LISTENing workers. See README "The reaper" for what it does and how it is started.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hopper/spi.hpp"

extern "C" {
#include "postgres.h"
#include "datatype/timestamp.h"
}

namespace hopper::reaper {

// Settings (GUCs), defined in reaper_gucs.cpp. All are PGC_SIGHUP: a reaper is a server process,
// so a per-session SET would not reach it.
extern bool enabled;           // hopper.reaper_enabled
extern int naptime_ms;         // hopper.reaper_naptime
extern int batch_size;         // hopper.reaper_batch_size
extern int prune_interval_s;   // hopper.reaper_prune_interval
extern int relay_interval_ms;  // hopper.notify_relay_interval
void define_gucs();

// The common part of a background worker's sigsetjmp handler, for an error that escaped every
// guard: report it, abort the transaction, reset memory and error state. The caller then pauses
// before carrying on, so a persistent error does not spin.
void recover_after_error();

// True in every process of a server that loaded hopper from shared_preload_libraries (set in the
// postmaster by _PG_init and inherited through fork).
extern bool preloaded;

// How a reaper came to run: started by the launcher of a preloaded server, or on demand by a
// backend (the install script, reaper_start(), or a push/pull that found none running).
enum class Mode : char { preload = 'p', dynamic = 'd' };
const char* mode_name(Mode m);

// What a newly started reaper is told (bgw_extra).
struct StartInfo {
    Mode mode;
    // Started by reaper_start() (the install script among its callers): keeps trying for the
    // lock a few seconds, since its holder may be a reaper on its way out (DROP and at once
    // CREATE EXTENSION). Any other start leaves at once when a reaper holds the lock.
    bool patient;
    // The transaction that asked for the reaper, when it may still be creating the extension:
    // the reaper waits for it to end before deciding that the extension is absent.
    TransactionId wait_for;
};

// Registers a dynamic background worker reaper for database `db`. Never waits for it to start.
// Returns false when no worker slot is free (with a WARNING if `warn`), and registers nothing
// during recovery (a hot standby: the postmaster would keep the slot until promotion) or in
// pg_upgrade.
bool start(Oid db, Mode mode, TransactionId wait_for, bool warn = true, bool patient = false);

// Whether the current database is a template: no reaper runs there (a connection to a template
// makes CREATE DATABASE from it wait, and the reaper would write history partitions into it).
// Reads the catalog: call inside a transaction.
bool current_database_is_template();

// Used by queue_push and queue_pull: restarts this database's reaper when none is running, after
// a server restart, say. Checks at most once every few seconds per backend; costs one clock
// comparison otherwise.
void ensure_running(spi::Connection& conn);

// This database's reaper as this backend last found it, for pushes that hand their wake-up to it.
// ensure_running() refreshes it with its periodic check (locate_running() when a reaper holds the
// lock, forget_running() otherwise). Between checks, known_alive() re-tests it without any lock
// (its PGPROC still carries the pid it had), which is a hint only: PostgreSQL 15 leaves the pid in
// the PGPROC of a process that has exited, until the slot is reused. still_running() asks the
// process array (a shared lock, a scan of the live processes) and forgets a reaper that is gone;
// a backend that has never looked (no push or pull yet) looks first, at most once in a few
// seconds. A push, release or retry decides with it, before commit. wake_known() sets the latch; it
// never raises, so it may run after commit.
void locate_running();
void forget_running();
bool known_alive();
bool still_running();
void wake_known() noexcept;

// Whether this database has the extension, and whether the schema named hopper is its own and a
// superuser's, as the reaper requires before it runs anything there. Call inside a transaction.
enum class Installed { absent, in_place, misplaced };
Installed installed();

// Registers the launcher (preload mode); only valid while shared_preload_libraries is processed.
void register_launcher();

// The session advisory lock that keeps exactly one reaper per database: pg_locks shows it as
// locktype advisory, classid kLockKey1, objid kLockKey2, objsubid queue_lock::kTagField4, which no
// SQL function can take (so no role can keep the reaper out).
constexpr uint32_t kLockKey1 = 0x686f7072;  // "hopr"
constexpr uint32_t kLockKey2 = 1;
// Takes it for the life of the session; false if another session holds it.
bool try_lock_for_session();
// A second lock of the same kind (objid kStartingKey2), held by a reaper from the moment it
// connects until it holds the reaper lock or leaves: a backend that finds no reaper but this lock
// taken starts none, so that many pushing backends do not each start one at the same time.
constexpr uint32_t kStartingKey2 = 2;
bool try_lock_starting();
void unlock_starting();
bool starting_is_held();
// Whether some session of this database holds it (a reaper is running here). Never waits.
bool lock_is_held();
// Whether a session wants this database to itself: DROP DATABASE, ALTER DATABASE RENAME or SET
// TABLESPACE (they lock the database exclusively, then wait up to 5 s for other connections to
// leave) or CREATE DATABASE using it as template (share lock). The reaper then steps aside (exits);
// a push, a pull or the launcher brings it back later if the database is still there.
bool database_wanted();

// A reaper process as seen in the server's backend status table.
struct Process {
    int pid;
    Oid database;
    Mode mode;
    bool active;           // holds the lock and has announced itself (not still starting or losing)
    TimestampTz last_run;  // 0: no pass finished yet
    uint64_t rescued;
    uint64_t pruned;
};
// Every reaper process of the server (all databases). Must run inside a transaction: the backend
// status snapshot it reads is kept until the transaction ends.
std::vector<Process> processes();
// Sets the latch of the launcher of a preloaded server, if one runs, so that it scans now and
// sees this reaper running: a reaper it started and never saw running was otherwise taken, if it
// disappeared before the next scan, for one that found no extension (retried after a minute).
// Must run inside a transaction, as processes().
void wake_launcher();

// How a reaper publishes its statistics through its pg_stat_activity entry, which every backend
// can read without shared memory of hopper's own (there is none when not preloaded).
constexpr const char* kAppNamePrefix = "hopper reaper: ";
std::string activity_text(TimestampTz last_run, uint64_t rescued, uint64_t pruned);

}  // namespace hopper::reaper
