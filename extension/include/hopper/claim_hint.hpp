// Where a queue's next claim may start: a shared per-queue position in pull order.
//
// Claimed and finished jobs leave dead entries at the front of jobs_pull_idx. Normally index scans
// mark them dead and later claims step over them for free, but while any session holds an old
// snapshot (a long report, a client idle in transaction) nothing can be marked or vacuumed, and a
// claim that starts at the front walks every job claimed since that snapshot was taken: the pull
// rate decays for as long as the snapshot lives. So each queue keeps a hint, a key
// (priority, run_at, id) below which no job is waiting, and claims start there.
//
// The hint may only go up when that stays true, and must come down whenever a job appears below it:
//  - a claim raises it to the last job it claimed, but not above a job that appeared while it ran
//    (the queue keeps its last lowerings), and not at all if its snapshot may predate the hint
//    (REPEATABLE READ, SERIALIZABLE) or it claimed with a filter or clock of its own (kinds, at).
//    "Due" is judged by the transaction's start, so a job pushed after that is not due for the
//    claim but lies below what it claimed when more urgent: the hint stays below such pushes too,
//    and within its own priority if the lowerings kept do not reach back that far;
//  - a transaction that made jobs available (push, retry, release, queue_retry) lowers it to
//    their key when it commits; one that may have put jobs back below it in other ways (a rescue,
//    a purge or cancel that rolls back, a claim that rolls back, even to a savepoint) clears it;
//  - a job scheduled for later at a priority more urgent than the jobs being claimed keeps the
//    hint at that priority, since it becomes due without any write;
//  - at least once a second a claim starts from the front anyway, so a job put back or locked by
//    something hopper does not know of (a direct UPDATE, a prepared transaction) waits a second
//    at most.
// The hints live in a dynamic shared memory segment made on first use and pinned for the life of
// the server (no preloading needed; without one to spare, claims start at the front), in a fixed
// number of slots lent to queues: a queue that finds none free takes the one idle longest, once
// it has been idle for some seconds and the reaper has relayed the wake-ups counted in it. A
// claim or a waiting pull lends one only to a queue of hopper.queues (looked up when a slot could
// be lent): names that are no queue would push the queues in use out. With
// hopper.claim_resume = off every claim starts at the front.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

extern "C" {
#include "postgres.h"
#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
}

namespace hopper::claim_hint {

// A job's place in pull order.
struct Key {
    int16_t priority;
    TimestampTz run_at;
    int64_t id;
};

// Whether a comes before b in pull order.
bool before(const Key& a, const Key& b);

// What one claim read: whether it starts at the hint, and how many lowerings it saw.
struct Start {
    int slot = -1;     // -1: no hint kept for this queue (off, or no room)
    uint32_t gen = 0;  // the slot's generation: it may pass to another queue meanwhile
    bool resume = false;
    Key key{};
    uint64_t seq = 0;  // the queue's lowerings seen so far
};

// Before a claim on queue, whatever hopper.claim_resume says: the queue's hint is cleared if the
// transaction (or the subtransaction) rolls back, since the rows it locked were passed over.
Start begin(const std::string& queue);
// After a claim that may move the hint (see above) returned jobs: the last of them in pull order,
// and the time "due" was judged by (run_at <= due_at).
void claimed(const Start& start, const Key& last, TimestampTz due_at);
// A job of queue at key becomes available when this transaction commits (delayed: not yet due).
void made_available(const std::string& queue, const Key& key, bool delayed);
// This transaction may put jobs of queue back below the hint: clear it when it ends.
void clear_at_end(const std::string& queue);
// Before a statement that locks available jobs of queues not known beforehand (cancel, purge): if
// the transaction rolls back, clear every hint of this database.
void clear_database_on_rollback();

// A queue of this database that holds a slot: where its claims start (valid: a hint is set;
// otherwise from the front) and when a push or claim last used it (to the second).
struct Position {
    std::string queue;
    bool valid;
    Key key;
    TimestampTz last_used;
};
std::vector<Position> positions();

// The same slots count the push wake-ups that the reaper relays (push_wakeup.cpp,
// reaper_relay.cpp): a push that committed due jobs bumps its queue's count and sets the reaper's
// latch, and the reaper notifies every queue of its database whose count moved. Nothing is read
// from the tables, so a relay step costs the same whatever the number of jobs.
//
// Before commit: whether queue holds a slot to count a wake-up in (taking one if it can).
bool can_count_wakeup(const std::string& queue);
// At commit (raises nothing): counts one wake-up for queue; false if it no longer holds a slot.
bool count_wakeup(const std::string& queue) noexcept;
// What the reaper last read of every slot's count, and the counts of this database's queues it
// read last (slot, value), to tell the slots once they are relayed.
struct WakeupCounts {
    std::vector<uint64_t> seen;
    std::vector<std::pair<int, uint64_t>> told;
};
// Fills counts with the current values: wake-ups counted before are not reported.
void read_wakeups(WakeupCounts& counts);
// The queues of this database whose count moved since counts was filled, which it then holds.
std::vector<std::string> woken_queues(WakeupCounts& counts);
// Once the reaper has sent what counts holds (read_wakeups, woken_queues): those counts are
// relayed, and an idle slot may pass to another queue. Until then it stays with its queue (for
// some minutes at most), so that a pass slower than the slots' idle time loses no wake-up.
void relayed(const WakeupCounts& counts);

// And each slot has a condition variable for the pulls that wait for its queue's jobs
// (pull_wait.hpp). Every wake-up of the queue, made when its transaction commits, signals one
// waiting pull per job made available, or all of them when the count is not known.
//
// Before commit: whether pulls waiting on queue can be woken (attaching the slots if need be).
bool can_wake(const std::string& queue);
// The queue's condition variable, taking a slot if it has none (nullptrs without one), and how
// many pulls wake-ups have signalled on it so far (a broadcast wakes every pull and counts none):
// a pull woken for a job it may not take tells by it whether a new wake-up came since it last
// passed one on.
struct Waiting {
    ConditionVariable* cv = nullptr;
    pg_atomic_uint64* signals = nullptr;
};
Waiting waiting_pulls(const std::string& queue);
// At commit (raises nothing): wakes up to `jobs` pulls waiting on queue; every one if jobs <= 0.
void wake_waiting_pulls(const std::string& queue, int64_t jobs) noexcept;

// While one lives, a subtransaction rolled back wakes no waiting pull: a claim's rescue of an
// expired lease that a trigger refused put no job back, and its waking every pull of the queue,
// each to meet the same refusal and wake the others, would keep them all busy for their wait.
class QuietRollbacks {
  public:
    QuietRollbacks();
    ~QuietRollbacks();
    QuietRollbacks(const QuietRollbacks&) = delete;
    QuietRollbacks& operator=(const QuietRollbacks&) = delete;
};

// What a rollback (of the transaction or of a subtransaction) does to the hints, done now rather
// than in claim_hint's own rollback callback (which then does it again, to no effect): a pull
// woken for the jobs a rolled-back claim put back must not resume past them (raises nothing).
void apply_at_rollback() noexcept;

// The committing transaction's hint changes, applied now if claim_hint's own commit callback has
// not yet (it then finds nothing left to do). Before the wake-ups of a commit: a pull woken before
// the hint was lowered resumed past the job that woke it, and found it only at its next look a
// second later. (The wake-ups now follow every commit callback; this keeps the order explicit.)
void apply_at_commit() noexcept;

}  // namespace hopper::claim_hint
