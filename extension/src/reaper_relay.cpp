// See include/hopper/reaper_relay.hpp.
#include <algorithm>
#include <deque>
#include <string>
#include <vector>

#include "hopper/jobs.hpp"
#include "hopper/notify.hpp"
#include "hopper/reaper_relay.hpp"
#include "hopper/worker_txn.hpp"
#include "hopper/spi.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/sinvaladt.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
}

namespace hopper::reaper {
namespace {

// A transaction that holds hopper.jobs longer than this no longer holds the mark back. A push
// whose transaction lasts longer than a second notifies by itself (push_wakeup.cpp), so only a
// commit that takes seconds after its pre-commit could be missed, and workers poll anyway.
constexpr int64_t kRelayGiveUpUs = 5 * USECS_PER_SEC;
// Bounds the memory of the marks waiting to settle (one per step at most).
constexpr size_t kMaxPending = 10000;

// A sequence value that settles once the transactions holding hopper.jobs when it was read end.
struct Pending {
    int64_t seq;
    TimestampTz at;
    std::vector<VirtualTransactionId> holders;
};

// Lives across transactions and passes (a static of the reaper process).
struct RelayState {
    bool primed = false;
    int64_t settled = 0;
    std::deque<Pending> pending;
};
RelayState state;

int64_t last_job_id(spi::Connection& conn) {
    // NULL until the sequence has handed out a value; cache 1, so every value at or below it has
    // been handed out.
    static spi::Statement st("SELECT pg_catalog.pg_sequence_last_value('hopper.job_id_seq')", {});
    spi::Result r = conn.exec(st, {});
    return r.empty() ? 0 : r.get_int64(0, 1);
}

// The transactions, other than this one, that hold a lock on hopper.jobs that a writer takes.
// VACUUM and autovacuum hold one too but never insert jobs: they are left out.
std::vector<VirtualTransactionId> writers_of_jobs(Oid rel) {
    std::vector<VirtualTransactionId> out;
    VirtualTransactionId* vxids = pg_guard([&] {
        LOCKTAG tag;
        SET_LOCKTAG_RELATION(tag, MyDatabaseId, rel);
        int count = 0;
        return GetLockConflicts(&tag, ShareLock, &count);
    });
    for (VirtualTransactionId* v = vxids; VirtualTransactionIdIsValid(*v); ++v) {
        PGPROC* proc = pg_guard([&] { return BackendIdGetProc(v->backendId); });
        if (proc != nullptr && (proc->statusFlags & (PROC_IS_AUTOVACUUM | PROC_IN_VACUUM)) != 0)
            continue;
        out.push_back(*v);
    }
    return out;
}

bool all_ended(const std::vector<VirtualTransactionId>& holders) {
    for (const VirtualTransactionId& v : holders)
        if (!pg_guard([&] { return VirtualXactLock(v, /*wait=*/false); })) return false;
    return true;
}

}  // namespace

void relay_prime() {
    int64_t seq = 0;
    std::vector<VirtualTransactionId> holders;
    bool present = true;
    worker::in_transaction([&] {
        Oid rel = jobs::relation();  // InvalidOid: the next pass notices and exits
        present = OidIsValid(rel);
        if (!present) return;
        spi::Connection conn;
        seq = last_job_id(conn);
        conn.finish();
        holders = writers_of_jobs(rel);
    });
    if (!present) return;
    TimestampTz since = GetCurrentTimestamp();
    for (;;) {
        bool ended = false;
        worker::in_transaction([&] { ended = all_ended(holders); });
        if (ended || GetCurrentTimestamp() - since >= kRelayGiveUpUs) break;
        pg_guard([] {
            pg_usleep(10000L);
            CHECK_FOR_INTERRUPTS();
        });
    }
    state.primed = true;
    state.settled = seq;
    state.pending.clear();
}

void relay_step() {
    if (!state.primed) return;
    int64_t settled = state.settled;
    size_t settled_records = 0;
    int64_t seq = 0;
    TimestampTz at = 0;
    std::vector<VirtualTransactionId> holders;
    worker::in_transaction([&] {
        // The NOTIFY lock is held across this commit: do not make it wait for the disk. Losing
        // this transaction in a crash loses nothing but a wake-up.
        pg_guard([] {
            (void)set_config_option("synchronous_commit", "off", PGC_USERSET, PGC_S_SESSION,
                                    GUC_ACTION_LOCAL, true, 0, false);
        });
        Oid rel = jobs::relation();  // InvalidOid: the next pass notices and exits
        if (!OidIsValid(rel)) return;
        at = GetCurrentTimestamp();
        for (const Pending& p : state.pending) {
            if (at - p.at < kRelayGiveUpUs && !all_ended(p.holders)) break;
            if (p.seq > settled) settled = p.seq;
            ++settled_records;
        }
        spi::Connection conn;
        seq = last_job_id(conn);
        holders = writers_of_jobs(rel);
        // This statement's snapshot is taken now, after the reads above: it sees every job at or
        // below the new settled mark that committed. The id range is its only condition, so it
        // walks the primary key and nothing else: offered "state = 'available'" beside it, the
        // planner took the partial pull index, whose id is its last column, and read every
        // waiting job on every step. One plan node, planned once (custom plans, as the id range
        // moves, made planning most of a step's cost); a step sees a few jobs.
        static spi::Statement scan(
            "SELECT queue, state = 'available' AND run_at <= pg_catalog.clock_timestamp() "
            "FROM hopper.jobs WHERE id > $1 AND id <= $2",
            {INT8OID, INT8OID}, CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
        spi::Result r = conn.exec(scan, {spi::arg(state.settled), spi::arg(seq)});
        std::vector<std::string> ready;
        for (uint64_t i = 0; i < r.rows(); ++i) {
            if (!r.get_bool(i, 2)) continue;
            std::string queue = r.get_text(i, 1);
            if (std::find(ready.begin(), ready.end(), queue) == ready.end())
                ready.push_back(std::move(queue));
        }
        for (const std::string& queue : ready) notify::queue_ready(queue);
        conn.finish();
    });
    // Committed: only now move the mark.
    state.pending.erase(state.pending.begin(),
                        state.pending.begin() + static_cast<long>(settled_records));
    if (holders.empty()) {
        if (seq > settled) settled = seq;
    } else if (seq > settled && (state.pending.empty() || state.pending.back().seq != seq)) {
        // (The same value as the newest waiting mark: no job id was taken since, and the holders
        // read then include every transaction that may still hold one.)
        state.pending.push_back({seq, at, std::move(holders)});
        if (state.pending.size() > kMaxPending) state.pending.pop_front();
    }
    state.settled = settled;
}

void relay_if_woken() {
    if (!state.primed || !MyLatch->is_set) return;
    pg_guard([] { ResetLatch(MyLatch); });
    bool failed = false;
    try {
        relay_step();
    } catch (...) {
        worker::remember_failure();
        failed = true;
    }
    if (failed) worker::report_failure("hopper reaper wake-up relay");
    // The latch may have been set for a configuration reload too: the nap must still see it.
    if (ConfigReloadPending) SetLatch(MyLatch);
}

}  // namespace hopper::reaper
