// The reaper background worker of one database: start-up (wait for the extension, take the lock),
// then one pass every hopper.reaper_naptime until SIGTERM, DROP EXTENSION, reaper_stop() or
// hopper.reaper_enabled = off.
//
// Error handling, in two layers. Every pass runs in C++ under try/catch: PostgreSQL errors inside
// it are PgErrors (pg_guard), the failed transaction is rolled back, a WARNING is logged and the
// next pass tries again. Below that, a sigsetjmp handler, as in PostgreSQL's own workers, catches
// any error raised outside a guard, so that no ERROR ever becomes a FATAL exit of the worker. The
// main function itself owns no C++ objects, so a longjmp back into it skips no destructor.
#include <algorithm>
#include <csetjmp>
#include <cstring>

#include "hopper/reaper.hpp"
#include "hopper/reaper_pass.hpp"
#include "hopper/reaper_relay.hpp"
#include "hopper/worker_txn.hpp"

extern "C" {
#include "access/xact.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "storage/procarray.h"
#include "tcop/tcopprot.h"
#include "utils/backend_status.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

PGDLLEXPORT void hopper_reaper_main(Datum main_arg);
}

namespace hopper::reaper {
namespace {

// A reaper that fails this many times in a row exits; the launcher or the next push or pull starts
// a fresh one later.
constexpr int kMaxFailuresInARow = 30;
// How long a patient reaper (see StartInfo) keeps trying for the lock: the holder may be a reaper
// on its way out (after DROP and CREATE EXTENSION, say).
constexpr int kLockTriesMs = 3000;

// State that must survive a longjmp into the main loop: statics, not locals.
StartInfo start_info;
bool running = false;   // holds the lock and has announced itself
bool starting = false;  // holds the starting lock (see try_lock_starting)
int failures_in_a_row = 0;
PassState pass_state;
TimestampTz last_run = 0;  // end of the last pass that went through

enum class Next { go_on, exit };

// Returns whether the latch was set (by a push that committed, a signal, ...) rather than the
// time running out.
bool nap(int ms) {
    return pg_guard([&] {
        int rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms,
                           PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
        return (rc & WL_LATCH_SET) != 0;
    });
}

// The rest of a relay step's pause (hopper.notify_relay_interval), slept without waiting on the
// latch: a process that is not waiting on its latch is not signalled when it is set, so the pushes
// that commit meanwhile only set it, and cost no kill() and no wake-up each. Returns whether one
// did.
bool paced_nap(int64_t us) {
    return pg_guard([&] {
        pg_usleep(us);
        bool woken = MyLatch->is_set;
        if (woken) ResetLatch(MyLatch);
        CHECK_FOR_INTERRUPTS();
        return woken;
    });
}

bool extension_present() {
    return pg_guard([] { return OidIsValid(get_extension_oid("hopper", true)); });
}

// Whether the extension exists, once the transaction that started this reaper (maybe the one
// running CREATE EXTENSION: dynamic workers start before their creator commits) has ended.
bool extension_present_after_creator() {
    bool present = false;
    TransactionId xid = start_info.wait_for;
    worker::in_transaction([&] {
        present = extension_present();
        if (present || !TransactionIdIsValid(xid)) return;
        pg_guard([&] {
            if (TransactionIdIsInProgress(xid)) XactLockTableWait(xid, nullptr, nullptr, XLTW_None);
        });
    });
    // Look again in a new transaction, whether or not there was a wait: the creator may have
    // committed between the first look and the in-progress test.
    if (!present && TransactionIdIsValid(xid))
        worker::in_transaction([&] { present = extension_present(); });
    return present;
}

constexpr const char* kMisplaced =
    "the schema hopper is not the extension's own, or not a superuser's";

// Checked before the reaper reads anything by the name hopper.*; see reaper_schema.cpp.
bool schema_in_place() {
    Installed is = Installed::absent;
    worker::in_transaction([&] { is = installed(); });
    if (is == Installed::misplaced)
        pg_guard([] {
            ereport(WARNING, (errmsg("hopper reaper does not start: %s", kMisplaced),
                              errhint("ALTER SCHEMA ... RENAME so that the extension's schema "
                                      "is named hopper, and give it to a superuser.")));
        });
    return is == Installed::in_place;
}

bool parked_for_update() {
    bool stopped = false;
    worker::in_transaction([&] {
        spi::Connection conn;
        // FOR SHARE waits for a reaper_stop() still in progress and then reads its outcome.
        static spi::Statement st("SELECT stopped FROM hopper.reaper_control FOR SHARE", {});
        spi::Result r = conn.exec(st, {});
        stopped = !r.empty() && r.get_bool(0, 1);
        conn.finish();
    });
    return stopped;
}

void report_activity(BackendState state) {
    std::string text = activity_text(last_run, pass_state.rescued, pass_state.pruned);
    pg_guard([&] { pgstat_report_activity(state, text.c_str()); });
}

// Whether another session needs the database alone (DROP DATABASE and friends): then logged, and
// the reaper exits. Asked before each start-up too: one that failed again and again (a read-only
// database, say) never reached the pass's own look, and DROP DATABASE failed meanwhile.
bool steps_aside() {
    bool wanted = false;
    worker::in_transaction([&] { wanted = database_wanted(); });
    if (wanted)
        pg_guard([] {
            ereport(LOG, (errmsg("hopper reaper exits: another session needs the database alone")));
        });
    return wanted;
}

// A database whose transactions are read-only by default (ALTER DATABASE ... SET
// default_transaction_read_only) takes no pushes or claims, and the reaper's writes would fail
// every pass: it leaves, and the launcher looks again a minute later.
bool read_only_database() {
    if (!DefaultXactReadOnly) return false;
    pg_guard([] {
        ereport(LOG, (errmsg("hopper reaper exits: transactions in this database are read-only "
                             "(default_transaction_read_only)")));
    });
    return true;
}

// A template database gets no reaper (README "Two ways to run"): CREATE DATABASE from it would
// wait for this connection to leave, and the passes would write history partitions into it.
bool template_database() {
    bool is_template = false;
    worker::in_transaction([&] { is_template = current_database_is_template(); });
    if (is_template)
        pg_guard([] { ereport(LOG, (errmsg("hopper reaper exits: the database is a template"))); });
    return is_template;
}

// Takes the reaper lock. A reaper started by a push or pull (or the launcher) leaves at once when
// another holds it, or holds the starting lock; a patient one keeps trying a few seconds.
bool take_reaper_lock() {
    bool locked = false;
    for (int waited = 0;; waited += 100) {
        worker::in_transaction([&] {
            if (!starting) starting = try_lock_starting();
            if (starting) locked = try_lock_for_session();
        });
        if (locked || !start_info.patient || waited >= kLockTriesMs) break;
        nap(100);
    }
    if (starting) {
        unlock_starting();
        starting = false;
    }
    return locked;
}

Next start_up() {
    // Before anything else, so that the backends that find no reaper meanwhile start no other:
    // an impatient reaper that finds another on its way leaves at once.
    if (!starting) worker::in_transaction([&] { starting = try_lock_starting(); });
    if (!starting && !start_info.patient) return Next::exit;
    if (steps_aside() || read_only_database() || template_database()) return Next::exit;
    if (!extension_present_after_creator() || !schema_in_place()) return Next::exit;
    if (!take_reaper_lock()) return Next::exit;  // another reaper serves this database
    // Read after taking the lock, so a reaper_stop() that ran meanwhile is seen.
    if (parked_for_update()) return Next::exit;

    std::string appname = std::string(kAppNamePrefix) + mode_name(start_info.mode);
    pg_guard([&] {
        // The statistics travel in pg_stat_activity: keep them flowing whatever the server says.
        SetConfigOption("track_activities", "on", PGC_SUSET, PGC_S_OVERRIDE);
        SetConfigOption("application_name", appname.c_str(), PGC_USERSET, PGC_S_OVERRIDE);
        pgstat_report_appname(appname.c_str());
    });
    running = true;
    report_activity(STATE_IDLE);
    worker::in_transaction([] { reaper::wake_launcher(); });
    return Next::go_on;
}

Next one_round() {
    if (!running) return start_up();
    report_activity(STATE_RUNNING);
    PassOutcome outcome = run_pass(pass_state);
    if (outcome == PassOutcome::skipped) {
        pg_guard([] {
            ereport(LOG, (errmsg("hopper reaper skips a pass: a lock on hopper's tables was not "
                                 "free (DROP EXTENSION or other DDL under way)")));
        });
        report_activity(STATE_IDLE);
        return Next::go_on;
    }
    if (outcome != PassOutcome::done) {
        const char* why = outcome == PassOutcome::extension_gone ? "the extension was dropped"
                          : outcome == PassOutcome::stopped      ? "hopper.reaper_stop() was called"
                          : outcome == PassOutcome::misplaced
                              ? kMisplaced
                              : "another session needs the database alone";
        int level = outcome == PassOutcome::misplaced ? WARNING : LOG;
        pg_guard([&] { ereport(level, (errmsg("hopper reaper exits: %s", why))); });
        return Next::exit;
    }
    last_run = GetCurrentTimestamp();
    report_activity(STATE_IDLE);
    return Next::go_on;
}

void reload_config_if_asked() {
    if (!ConfigReloadPending) return;
    ConfigReloadPending = false;
    pg_guard([] { ProcessConfigFile(PGC_SIGHUP); });
}

// One round under try/catch; returns what to do next. Nothing in here raises past the catch.
Next guarded_round() {
    Next next = Next::go_on;
    bool failed = false;
    try {
        reload_config_if_asked();
        if (!enabled) return Next::exit;
        next = one_round();
    } catch (...) {
        worker::remember_failure();
        failed = true;
    }
    if (failed) {
        worker::report_failure(running ? "hopper reaper pass" : "hopper reaper start-up");
        if (++failures_in_a_row >= kMaxFailuresInARow) {
            pg_guard([] {
                ereport(WARNING,
                        (errmsg("hopper reaper exits after %d failed passes in a row",
                                kMaxFailuresInARow),
                         errhint("The warnings before this one say why. The launcher, or the "
                                 "next push or pull, starts a reaper again.")));
            });
            return Next::exit;
        }
    } else {
        failures_in_a_row = 0;
    }
    return next;
}

// Sleeps hopper.reaper_naptime, relaying push wake-ups whenever a push sets the latch (see
// reaper_relay.hpp). The sleep is cut in slices of kStepAsideCheckMs: DROP DATABASE waits only 5 s
// for other connections to leave, so the reaper looks at least that often whether someone wants
// its database.
constexpr int kStepAsideCheckMs = 1000;

// One relay step under try/catch. After a failure the relay rests until the next pass, so that a
// persistent error is logged once a pass rather than once a push.
// Returns whether the step notified anyone.
bool relay_failed_this_nap = false;
bool guarded_relay_step() {
    if (relay_failed_this_nap) return false;
    bool sent = false;
    try {
        sent = relay_step();
    } catch (...) {
        worker::remember_failure();
        relay_failed_this_nap = true;
    }
    if (relay_failed_this_nap) worker::report_failure("hopper reaper wake-up relay");
    return sent;
}

Next guarded_nap() {
    bool failed = false;
    relay_failed_this_nap = false;
    try {
        TimestampTz start = GetCurrentTimestamp();
        TimestampTz until = start + static_cast<int64_t>(naptime_ms) * 1000;
        TimestampTz next_check = start + kStepAsideCheckMs * 1000;
        for (;;) {
            TimestampTz now = GetCurrentTimestamp();
            if (now >= until) break;
            TimestampTz wake_at = until < next_check ? until : next_check;
            // No relay step before the pause after the last one ends (relay_paced_until).
            TimestampTz paced_until = relay_paced_until();
            bool woken = paced_until > now ? paced_nap(std::min(paced_until, wake_at) - now)
                                           : nap(static_cast<int>((wake_at - now + 999) / 1000));
            // A reload may have turned the reaper off or shortened its naptime: round at once.
            if (ConfigReloadPending) break;
            // The counts are read after every nap, woken or not: a push's latch can be consumed
            // elsewhere (any lock or condition-variable wait in a pass resets it too), and its
            // wake-up must then wait a nap at most, not for the next push. Woken during the
            // pause: the step waits for its end, on the next round.
            if (GetCurrentTimestamp() >= relay_paced_until())
                (void)guarded_relay_step();
            else if (woken)
                pg_guard([] { SetLatch(MyLatch); });
            now = GetCurrentTimestamp();
            if (now < next_check || now >= until) continue;
            next_check = now + kStepAsideCheckMs * 1000;
            if (steps_aside()) return Next::exit;
        }
    } catch (...) {
        worker::remember_failure();
        failed = true;
    }
    if (failed) worker::report_failure("hopper reaper nap");
    return Next::go_on;
}

}  // namespace

void recover_after_error() {
    error_context_stack = nullptr;
    HOLD_INTERRUPTS();
    EmitErrorReport();
    AbortCurrentTransaction();
    MemoryContextSwitchTo(TopMemoryContext);
    FlushErrorState();
    RESUME_INTERRUPTS();
}
}  // namespace hopper::reaper

void hopper_reaper_main(Datum main_arg) {
    using namespace hopper::reaper;
    pqsignal(SIGHUP, SignalHandlerForConfigReload);
    pqsignal(SIGTERM, die);
    BackgroundWorkerUnblockSignals();
    std::memcpy(&start_info, MyBgworkerEntry->bgw_extra, sizeof start_info);
    BackgroundWorkerInitializeConnectionByOid(DatumGetObjectId(main_arg), InvalidOid, 0);
    // The reaper runs as a superuser in every database with the extension, and a database's
    // owner may set its search_path: an operator or type planted ahead of pg_catalog there would
    // run with the reaper's rights. Its SQL names hopper's objects in full and needs nothing else.
    SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
    // hopper.notify is a session's choice for its own pushes, made when they count their wake-up:
    // the reaper relays those of the sessions that kept it on, and announces what it makes
    // available itself (delayed jobs falling due, rescues), whatever the database or the server
    // sets by default.
    SetConfigOption("hopper.notify", "on", PGC_SUSET, PGC_S_OVERRIDE);

    sigjmp_buf local_sigjmp_buf;
    if (sigsetjmp(local_sigjmp_buf, 1) != 0) {
        recover_after_error();
        if (++failures_in_a_row >= kMaxFailuresInARow) proc_exit(1);
        (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, naptime_ms,
                        PG_WAIT_EXTENSION);
        ResetLatch(MyLatch);
    }
    PG_exception_stack = &local_sigjmp_buf;

    for (;;) {
        CHECK_FOR_INTERRUPTS();
        if (guarded_round() == Next::exit) proc_exit(0);
        if (guarded_nap() == Next::exit) proc_exit(0);
    }
}
