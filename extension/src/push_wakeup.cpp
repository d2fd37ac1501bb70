// notify::queue_pushed: the wake-ups of a push, made after commit: the pulls waiting on its queue
// (pull_wait.hpp), and the listeners, through this database's reaper instead of a NOTIFY in the
// pushing transaction. See include/hopper/notify.hpp.
//
// Callbacks registered once per backend do the work, a transaction callback and, for what follows
// the commit, a resource-release one:
//  - at pre-commit (errors may still abort the transaction) it decides, for each queue that got
//    due jobs: relay if hopper.notify_relay is on, a reaper is known to run and the queue holds a
//    claim-hint slot to count the wake-up in; else NOTIFY the queue itself, as PostgreSQL still
//    allows then;
//  - once the commit is done (the jobs are visible; nothing may raise any more) it signals one
//    waiting pull per job, counts the relayed wake-ups in their slots and sets the reaper's latch.
//    The reaper then notifies the queues whose counts moved (reaper_relay.cpp), so a listener can
//    never hear of a job before it is visible. "Done" is the last phase of the commit's resource
//    release (NOTIFY's own signals go out just after it), not the commit callback: PostgreSQL sends
//    the transaction's invalidations between the two, and a pull woken before them read its queue's
//    row as remembered (queue_rows.hpp), before the change the transaction made to it (the first
//    packed push marks the queue packed; queue_resume unpauses it), claimed nothing and slept
//    until its next look, up to a second later. It finds the commit's locks released too;
//  - and then it looks again at the jobs that were not due at pre-commit: one that fell due
//    meanwhile (a commit that waited for a synchronous standby, say) may have been passed over by
//    the reaper, whose look at that time did not see the commit yet and whose next looks start
//    after it. Such a queue's waiting pulls are woken and its wake-up counted for the reaper to
//    relay, whatever hopper.notify_relay says (no NOTIFY can be sent any more).
// A slot only passes to another queue after ten idle seconds, and the pre-commit look marks it
// used; a count made in it stays until the reaper has relayed it, however long its pass takes (up
// to five minutes, claim_hint.cpp kUnrelayedIdleUs, for a reaper that exits without relaying). So
// a count is lost only if the commit itself takes ten seconds (a synchronous standby that does not
// answer, say: the slot may have passed on by then), if the reaper exits before relaying it, or
// if its pass holds it up for five minutes; workers poll anyway. A prepared transaction's pushes
// wake nobody: no NOTIFY may be prepared, and COMMIT PREPARED runs no callback of the session that
// prepared.
#include <algorithm>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hopper/claim_hint.hpp"
#include "hopper/guc.hpp"
#include "hopper/notify.hpp"
#include "hopper/reaper.hpp"

extern "C" {
#include "access/xact.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"
}

namespace hopper::notify {
namespace {

// A queue the current transaction pushed to (or made jobs available in, queue_ready): how many
// jobs (0: wake every waiting pull), the earliest run_at among them, and whether a push asked for
// a NOTIFY (hopper.notify as it was then). Kept per subtransaction, so that a push rolled back to
// a savepoint wakes no one.
struct Pushed {
    std::string queue;
    TimestampTz run_at;
    int64_t jobs;
    bool notify;
    SubTransactionId subxact;
};

// Pulls to wake on a queue at commit: how many (0: all).
struct Wake {
    std::string queue;
    int64_t jobs;
    SubTransactionId subxact;
};

// A transaction's entries (Pushed or Wake) in the order made, found by queue in constant time: a
// transaction may make jobs available in tens of thousands of queues (the reaper's first pass
// announces every queue with due jobs), and a search of the list per queue made that quadratic.
// The entries of a subtransaction are the list's tail when it ends: it was begun after every
// entry before them, and those of its own subtransactions were dropped or passed up to it. The
// subtransaction callbacks handle the tail alone and never allocate.
template <typename Entry>
class Entries {
  public:
    // The entry of `queue` made in subtransaction `subxact`, or nullptr.
    Entry* find(const std::string& queue, SubTransactionId subxact) {
        auto it = latest_.find(queue);
        if (it == latest_.end() || list_[it->second].subxact != subxact) return nullptr;
        return &list_[it->second];
    }
    void add(Entry e) {
        list_.push_back(std::move(e));
        latest_[list_.back().queue] = list_.size() - 1;
    }
    // A rolled-back subtransaction's entries go. A queue's older entry then goes unindexed: its
    // next push makes a new entry beside it, and the commit acts on both, as on one.
    void roll_back(SubTransactionId mine) noexcept {
        while (!list_.empty() && list_.back().subxact == mine) {
            auto it = latest_.find(list_.back().queue);
            if (it != latest_.end() && it->second == list_.size() - 1) latest_.erase(it);
            list_.pop_back();
        }
    }
    // A committed subtransaction's entries pass to its parent.
    void pass_up(SubTransactionId mine, SubTransactionId parent) noexcept {
        for (auto it = list_.rbegin(); it != list_.rend() && it->subxact == mine; ++it)
            it->subxact = parent;
    }
    // Called at every transaction end: what one transaction over tens of thousands of queues
    // grew is given back, or every later one would clear its buckets.
    void clear() noexcept {
        if (list_.capacity() > kKept) {
            std::vector<Entry>().swap(list_);
            std::unordered_map<std::string, size_t>().swap(latest_);
        } else {
            list_.clear();
            if (!latest_.empty()) latest_.clear();
        }
    }
    const std::vector<Entry>& all() const { return list_; }

  private:
    static constexpr size_t kKept = 1024;
    std::vector<Entry> list_;
    std::unordered_map<std::string, size_t> latest_;  // queue -> its latest entry in list_
};

// Each registration is remembered on its own: if one fails (out of memory), a later push registers
// what is missing and nothing twice, so no callback runs twice per event.
bool xact_registered = false;
bool subxact_registered = false;
bool release_registered = false;
// The current transaction's pushes and wake-ups; reset at every transaction end.
bool pending = false;
bool committed = false;  // the commit callback has run: the wake-ups follow its release
Entries<Pushed> pushed_queues;
std::vector<std::string> relayed_queues;  // decided at pre-commit, counted at commit
Entries<Wake> pulls_to_wake;
// When pre-commit judged due-ness (0: it did not run); the pushes not due then are looked at
// again at commit.
TimestampTz judged_at = 0;
bool not_due_at_pre_commit = false;

void reset() noexcept {
    pending = false;
    committed = false;
    judged_at = 0;
    not_due_at_pre_commit = false;
    pushed_queues.clear();
    relayed_queues.clear();
    pulls_to_wake.clear();
}

void decide_at_pre_commit() {
    // Jobs that are not due when their push commits are announced by the reaper's pass in which
    // they fall due (reaper_pass.cpp); judged now, not at the push, for a transaction that stays
    // open past its jobs' run_at.
    TimestampTz now = GetCurrentTimestamp();
    judged_at = now;
    std::optional<bool> relay;  // asked once, and only if a job is due
    for (const Pushed& p : pushed_queues.all()) {
        if (p.run_at > now) {
            not_due_at_pre_commit = true;
            continue;
        }
        wake_pulls_at_commit(p.queue, p.jobs);
        if (!p.notify) continue;
        if (!relay) relay = guc::notify_relay && reaper::still_running();
        if (*relay && claim_hint::can_count_wakeup(p.queue))
            relayed_queues.push_back(p.queue);
        else
            tell_listeners(p.queue);
    }
}

void on_transaction_event(XactEvent event, void*);
void after_commit(ResourceReleasePhase phase, bool is_commit, bool is_top_level, void*);

// At commit (raises nothing): the wake-ups of the jobs not due at pre-commit that are due now.
// Whether it counted a wake-up for the reaper to relay.
bool fell_due_during_commit() noexcept {
    TimestampTz now = GetCurrentTimestamp();
    bool counted = false;
    for (const Pushed& p : pushed_queues.all()) {
        if (p.run_at <= judged_at || p.run_at > now) continue;
        claim_hint::wake_waiting_pulls(p.queue, p.jobs);
        if (p.notify && reaper::known_alive())
            counted = claim_hint::count_wakeup(p.queue) || counted;
    }
    return counted;
}

// A rolled-back subtransaction's entries go; a committed one's pass to its parent.
void on_subtransaction_event(SubXactEvent event, SubTransactionId mine, SubTransactionId parent,
                             void*) {
    if (!pending) return;
    if (event == SUBXACT_EVENT_ABORT_SUB) {
        pushed_queues.roll_back(mine);
        pulls_to_wake.roll_back(mine);
    } else if (event == SUBXACT_EVENT_COMMIT_SUB) {
        pushed_queues.pass_up(mine, parent);
        pulls_to_wake.pass_up(mine, parent);
    }
}

void register_callback() {
    if (!release_registered) {
        pg_guard([] {
            if (!xact_registered) {
                RegisterXactCallback(on_transaction_event, nullptr);
                xact_registered = true;
            }
            if (!subxact_registered) {
                RegisterSubXactCallback(on_subtransaction_event, nullptr);
                subxact_registered = true;
            }
            RegisterResourceReleaseCallback(after_commit, nullptr);
            release_registered = true;
        });
    }
    if (!pending) {
        reset();
        pending = true;
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
        case XACT_EVENT_COMMIT:
            committed = true;  // the work is after_commit's
            return;
        default:  // abort, prepare, and the parallel-worker events (pushes never run there)
            reset();
            return;
    }
}

// Called for every resource owner released, in each phase: the top-level commit's last phase is
// the one (see the comment at the top).
void after_commit(ResourceReleasePhase phase, bool is_commit, bool is_top_level, void*) {
    if (!committed || phase != RESOURCE_RELEASE_AFTER_LOCKS || !is_commit || !is_top_level) return;
    claim_hint::apply_at_commit();
    for (const Wake& w : pulls_to_wake.all()) claim_hint::wake_waiting_pulls(w.queue, w.jobs);
    bool counted = false;
    for (const std::string& queue : relayed_queues)
        counted = claim_hint::count_wakeup(queue) || counted;
    if (not_due_at_pre_commit) counted = fell_due_during_commit() || counted;
    if (counted) reaper::wake_known();
    reset();
}

void announce_at_commit(const std::string& queue, TimestampTz run_at, int64_t jobs) {
    register_callback();
    SubTransactionId subxact = GetCurrentSubTransactionId();
    Pushed* it = pushed_queues.find(queue, subxact);
    if (it == nullptr) {
        pushed_queues.add({queue, run_at, jobs, guc::notify, subxact});
    } else {
        it->run_at = std::min(it->run_at, run_at);
        it->jobs = it->jobs > 0 && jobs > 0 ? it->jobs + jobs : 0;
        it->notify = it->notify || guc::notify;
    }
}

}  // namespace

void queue_pushed(const std::string& queue, TimestampTz run_at, int64_t jobs) {
    announce_at_commit(queue, run_at, std::max<int64_t>(jobs, 1));
}

void queue_ready(const std::string& queue) {
    // As a push's: decided at commit, relayed by the reaper where one runs (no NOTIFY lock held
    // across the commit), and dropped by PREPARE TRANSACTION, which refuses a pending NOTIFY.
    announce_at_commit(queue, DT_NOBEGIN, 0);
}

void wake_pulls_at_commit(const std::string& queue, int64_t jobs) {
    // Attaches the shared slots now, while that may still raise: the commit cannot.
    if (!claim_hint::can_wake(queue)) return;
    register_callback();
    SubTransactionId subxact = GetCurrentSubTransactionId();
    Wake* it = pulls_to_wake.find(queue, subxact);
    if (it == nullptr)
        pulls_to_wake.add({queue, std::max<int64_t>(jobs, 0), subxact});
    else if (it->jobs > 0)
        it->jobs = jobs > 0 ? it->jobs + jobs : 0;
}

}  // namespace hopper::notify
