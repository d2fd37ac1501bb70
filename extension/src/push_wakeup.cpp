// notify::queue_pushed: the wake-up of a push, handed to this database's reaper after commit
// instead of a NOTIFY in the pushing transaction. See include/hopper/notify.hpp.
//
// A transaction callback, registered once per backend, does the work:
//  - at pre-commit (errors may still abort the transaction) it decides, for each queue that got
//    due jobs: relay if hopper.notify_relay is on, a reaper is known to run and the queue holds a
//    claim-hint slot to count the wake-up in; else NOTIFY the queue itself, as PostgreSQL still
//    allows then;
//  - at commit (the jobs are visible; nothing may raise any more) it counts the relayed wake-ups
//    in their slots and sets the reaper's latch. The reaper then notifies the queues whose counts
//    moved (reaper_relay.cpp), so a listener can never hear of a job before it is visible.
// A slot only passes to another queue after ten idle seconds, and the pre-commit look marks it
// used, so a count is lost only if the commit itself takes that long (a synchronous standby that
// does not answer, say); workers poll anyway. A prepared transaction's pushes wake nobody: no
// NOTIFY may be prepared, and COMMIT PREPARED runs no callback of the session that prepared.
#include <algorithm>
#include <string>
#include <vector>

#include "hopper/claim_hint.hpp"
#include "hopper/guc.hpp"
#include "hopper/notify.hpp"
#include "hopper/reaper.hpp"

extern "C" {
#include "access/xact.h"
#include "utils/timestamp.h"
}

namespace hopper::notify {
namespace {

// A queue the current transaction pushed to, and the earliest run_at of its jobs.
struct Pushed {
    std::string queue;
    TimestampTz run_at;
};

bool callback_registered = false;
// The current transaction's pushes; reset at every transaction end.
bool pending = false;
std::vector<Pushed> pushed_queues;
std::vector<std::string> relayed_queues;  // decided at pre-commit, counted at commit

void reset() noexcept {
    pending = false;
    pushed_queues.clear();
    relayed_queues.clear();
}

void decide_at_pre_commit() {
    // Jobs that are not due when their push commits are announced by the reaper's pass in which
    // they fall due (reaper_pass.cpp); judged now, not at the push, for a transaction that stays
    // open past its jobs' run_at.
    TimestampTz now = GetCurrentTimestamp();
    bool relay = guc::notify_relay && reaper::still_running();
    for (const Pushed& p : pushed_queues) {
        if (p.run_at > now) continue;
        if (relay && claim_hint::can_count_wakeup(p.queue))
            relayed_queues.push_back(p.queue);
        else
            queue_ready(p.queue);
    }
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
        case XACT_EVENT_COMMIT: {
            bool counted = false;
            for (const std::string& queue : relayed_queues)
                counted = claim_hint::count_wakeup(queue) || counted;
            if (counted) reaper::wake_known();
            reset();
            return;
        }
        default:  // abort, prepare, and the parallel-worker events (pushes never run there)
            reset();
            return;
    }
}

}  // namespace

void queue_pushed(const std::string& queue, TimestampTz run_at) {
    if (!guc::notify) return;
    if (!callback_registered) {
        pg_guard([] { RegisterXactCallback(on_transaction_event, nullptr); });
        callback_registered = true;
    }
    if (!pending) {
        reset();
        pending = true;
    }
    auto same = [&](const Pushed& p) { return p.queue == queue; };
    auto it = std::find_if(pushed_queues.begin(), pushed_queues.end(), same);
    if (it == pushed_queues.end())
        pushed_queues.push_back({queue, run_at});
    else if (run_at < it->run_at)
        it->run_at = run_at;
}

}  // namespace hopper::notify
