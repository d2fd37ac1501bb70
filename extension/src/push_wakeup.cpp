// notify::queue_pushed: the wake-up of a push, handed to this database's reaper after commit
// instead of a NOTIFY in the pushing transaction. See include/hopper/notify.hpp.
//
// A transaction callback, registered once per backend, does the work:
//  - at pre-commit (errors may still abort the transaction) it decides: relay if a reaper is known
//    to run and the first push of the transaction is recent, else NOTIFY each pushed queue itself,
//    as PostgreSQL still allows then;
//  - at commit (the jobs are visible; nothing may raise any more) it sets the reaper's latch. The
//    reaper then looks for new jobs and notifies their queues (reaper_relay.cpp), so a listener
//    can never hear of a job before it is visible.
// A push whose transaction stays open for long notifies directly: the reaper stops waiting for
// transactions that hold hopper.jobs for longer than a few seconds (kRelayGiveUpUs in
// reaper_relay.cpp), and such a push might commit after it stopped.
#include <algorithm>
#include <string>
#include <vector>

#include "hopper/guc.hpp"
#include "hopper/notify.hpp"
#include "hopper/reaper.hpp"

extern "C" {
#include "access/xact.h"
#include "commands/async.h"
#include "utils/timestamp.h"
}

namespace hopper::notify {
namespace {

// A push older than this at commit time notifies directly (see the comment at the top).
constexpr int64_t kRelayWithinUs = 1 * USECS_PER_SEC;

bool callback_registered = false;
// The current transaction's pushes that owe a wake-up; reset at every transaction end.
bool pending = false;
bool relay_at_commit = false;
TimestampTz first_push = 0;
std::vector<std::string> pushed_queues;

void reset() noexcept {
    pending = false;
    relay_at_commit = false;
    pushed_queues.clear();
}

void decide_at_pre_commit() {
    bool recent = GetCurrentTimestamp() - first_push < kRelayWithinUs;
    if (guc::notify_relay && recent && reaper::still_running()) {
        relay_at_commit = true;
        return;
    }
    for (const std::string& queue : pushed_queues) queue_ready(queue);
}

void on_transaction_event(XactEvent event, void*) {
    if (!pending) return;
    switch (event) {
        case XACT_EVENT_PRE_COMMIT: {
            // Before commit an ERROR still aborts the transaction cleanly.
            if (!detail::capture_errors(decide_at_pre_commit)) {
                reset();
                detail::raise_saved_error();
            }
            return;
        }
        case XACT_EVENT_COMMIT:
            if (relay_at_commit) reaper::wake_known();
            reset();
            return;
        case XACT_EVENT_PRE_PREPARE:
            // The jobs become visible at COMMIT PREPARED, in whatever session runs it; the relay
            // finds them as soon as anything wakes the reaper after that.
            return;
        default:  // abort, prepare, and the parallel-worker events (pushes never run there)
            reset();
            return;
    }
}

}  // namespace

void queue_pushed(const std::string& queue) {
    if (!guc::notify) return;
    if (!guc::notify_relay) return queue_ready(queue);
    if (!callback_registered) {
        pg_guard([] { RegisterXactCallback(on_transaction_event, nullptr); });
        callback_registered = true;
    }
    if (!pending) {
        reset();
        pending = true;
        first_push = GetCurrentStatementStartTimestamp();
    }
    if (std::find(pushed_queues.begin(), pushed_queues.end(), queue) == pushed_queues.end())
        pushed_queues.push_back(queue);
}

}  // namespace hopper::notify
