// See include/hopper/reaper_relay.hpp.
#include <string>
#include <vector>

#include "hopper/claim_hint.hpp"
#include "hopper/notify.hpp"
#include "hopper/reaper.hpp"
#include "hopper/reaper_relay.hpp"
#include "hopper/worker_txn.hpp"

extern "C" {
#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
}

namespace hopper::reaper {
namespace {

// Lives across transactions and passes (a static of the reaper process).
bool primed = false;
claim_hint::WakeupCounts counts;
TimestampTz paced_until = 0;

}  // namespace

void relay_prime() {
    // In a transaction, as in the backends that use the hints' segment: attaching (or creating) it
    // maps it under the transaction's resource owner, and the mapping is then pinned for good.
    worker::in_transaction([] { claim_hint::read_wakeups(counts); });
    claim_hint::relayed(counts);
    primed = true;
}

bool relay_step() {
    if (!primed) return false;
    claim_hint::WakeupCounts next = counts;
    std::vector<std::string> queues = claim_hint::woken_queues(next);
    if (queues.empty()) return false;
    TimestampTz began = GetCurrentTimestamp();
    worker::in_transaction([&] {
        // The NOTIFY lock is held across this commit: do not make it wait for the disk. Losing
        // this transaction in a crash loses nothing but a wake-up.
        pg_guard([] {
            (void)set_config_option("synchronous_commit", "off", PGC_USERSET, PGC_S_SESSION,
                                    GUC_ACTION_LOCAL, true, 0, false);
        });
        for (const std::string& queue : queues) notify::tell_listeners(queue);
    });
    // Sent: only now take the counts as seen (a failed step reports them again next time), and
    // let their slots pass to other queues.
    claim_hint::relayed(next);
    counts = std::move(next);
    paced_until = began + static_cast<int64_t>(relay_interval_ms) * 1000;
    return true;
}

TimestampTz relay_paced_until() {
    return paced_until;
}

void relay_if_woken() {
    if (!primed || !MyLatch->is_set || GetCurrentTimestamp() < paced_until) return;
    pg_guard([] { ResetLatch(MyLatch); });
    bool failed = false;
    try {
        (void)relay_step();
    } catch (...) {
        worker::remember_failure();
        failed = true;
    }
    if (failed) worker::report_failure("hopper reaper wake-up relay");
    // The latch may have been set for a configuration reload too: the nap must still see it.
    if (ConfigReloadPending) SetLatch(MyLatch);
}

}  // namespace hopper::reaper
