// See include/hopper/worker_txn.hpp.
#include <cstring>
#include <exception>

#include "hopper/worker_txn.hpp"

extern "C" {
#include "access/xact.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
}

namespace hopper::worker {
namespace {

// Plain buffers: filled inside a catch block, where nothing may allocate or raise.
struct Failure {
    int sqlstate;
    char message[1024];
    char detail[1024];
};
Failure failure;

void copy_into(char* dst, size_t size, const char* src) {
    std::strncpy(dst, src ? src : "", size - 1);
    dst[size - 1] = '\0';
}

}  // namespace

void begin_transaction() {
    pg_guard([] {
        SetCurrentStatementStartTimestamp();
        StartTransactionCommand();
        // Durable here, but not waiting for a synchronous standby: while the standby is down such
        // a commit would wait without end, and every later step of the worker with it (rescues,
        // schedules, the wake-up relay). What the reaper writes is safe to lose in a failover: the
        // new primary's reaper rescues, prunes and makes partitions again, and a schedule's tick
        // is pushed again once (its dedup key). Any commit that waits for the standby afterwards
        // (a claim of a rescued job) carries these writes to it, WAL being sent in order.
        if (synchronous_commit > SYNCHRONOUS_COMMIT_LOCAL_FLUSH)
            (void)set_config_option("synchronous_commit", "local", PGC_USERSET, PGC_S_SESSION,
                                    GUC_ACTION_LOCAL, true, 0, false);
        PushActiveSnapshot(GetTransactionSnapshot());
    });
}

void commit_transaction() {
    pg_guard([] {
        PopActiveSnapshot();
        CommitTransactionCommand();
    });
}

void abort_transaction() noexcept {
    // AbortCurrentTransaction copes with every state: nothing open (it does nothing), open, or
    // already failed. It only raises on broken internal state; PostgreSQL's own workers call it
    // unguarded too, and a longjmp from here lands in the worker's sigsetjmp handler.
    AbortCurrentTransaction();
}

void remember_failure() noexcept {
    failure.sqlstate = ERRCODE_EXTERNAL_ROUTINE_EXCEPTION;
    failure.detail[0] = '\0';
    try {
        throw;
    } catch (const PgError& e) {
        failure.sqlstate = e.sqlstate();
        copy_into(failure.message, sizeof failure.message, e.what());
        copy_into(failure.detail, sizeof failure.detail, e.detail().c_str());
    } catch (const std::exception& e) {
        copy_into(failure.message, sizeof failure.message, e.what());
    } catch (...) {
        copy_into(failure.message, sizeof failure.message, "unknown C++ exception");
    }
}

void report_failure(const char* what_failed) {
    abort_transaction();
    ereport(WARNING,
            (errcode(failure.sqlstate), errmsg("%s failed: %s", what_failed, failure.message),
             failure.detail[0] ? errdetail_internal("%s", failure.detail) : 0));
}

}  // namespace hopper::worker
