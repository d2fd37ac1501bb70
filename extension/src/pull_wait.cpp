// See include/hopper/pull_wait.hpp.
#include "hopper/pull_wait.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "hopper/args.hpp"
#include "hopper/boundary.hpp"
#include "hopper/claim_hint.hpp"
#include "hopper/limits.hpp"

extern "C" {
#include "miscadmin.h"
#include "access/xact.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

namespace hopper::pull_wait {
namespace {

// The longest sleep between attempts (see the header), and the one for a queue without a slot,
// which nothing can wake.
constexpr int64_t kRecheckUs = USECS_PER_SEC;
constexpr int64_t kUnannouncedUs = 100 * 1000;

// Subtransactions rolled back in this backend since its first wait. PostgreSQL takes a backend
// off the condition variable it prepared to sleep on when a subtransaction rolls back: the
// rescue of an expired lease that a trigger of the user's refused, in an attempt, does that.
uint64_t rolled_back_subtransactions = 0;
bool subtransaction_callback_registered = false;

void count_rollbacks(SubXactEvent event, SubTransactionId, SubTransactionId, void*) {
    if (event == SUBXACT_EVENT_ABORT_SUB) ++rolled_back_subtransactions;
}

class Waiter {
  public:
    // Waits until wait_us from now at most.
    Waiter(std::string queue, int64_t wait_us);
    ~Waiter();
    Waiter(const Waiter&) = delete;
    Waiter& operator=(const Waiter&) = delete;

    // Before each claim attempt: from here on a wake-up of the queue is not missed.
    void arm();
    // After an attempt that claimed nothing: sleeps until a wake-up, a second, or the end of the
    // wait, whichever comes first. False once the wait is over (then nothing was slept).
    bool sleep();
    // Whether the last sleep ended with a wake-up (not its timeout).
    bool woken() const { return woken_; }
    // After a wake-up this pull could not use: hands it on to the next waiting pull of the queue,
    // unless no new wake-up has been signalled on the queue since this pull last handed one on.
    // A pass-on is no new wake-up, so two pulls that take other kinds cannot hand one back and
    // forth; yet a pull that pushes of other kinds wake again and again passes each one on.
    void pass_on_if_new();

  private:
    std::string queue_;
    TimestampTz deadline_;
    ConditionVariable* cv_ = nullptr;
    pg_atomic_uint64* signals_ = nullptr;  // cv_'s count of wake-ups signalled
    bool armed_ = false;                   // on a condition variable's wait list
    bool woken_ = false;
    // The count when the last sleep was woken, and when this pull last passed a wake-up on
    // (none yet: passed_ is false). Read on waking rather than later, so that a wake-up
    // signalled while this pull's attempt runs, which may come to this pull next, moves it again.
    uint64 woken_at_ = 0;
    uint64 passed_at_ = 0;
    bool passed_ = false;
};

}  // namespace

int64_t wait_us(FunctionCallInfo fcinfo, int n, const char* function) {
    int64_t us =
        args::interval_us(fcinfo, n, "wait", 0, args::kMaxWaitUs, /*allow_zero=*/true).value_or(0);
    if (us > 0 && IsolationUsesXactSnapshot())
        throw PgError(ERRCODE_FEATURE_NOT_SUPPORTED,
                      std::string(function) + " can only wait in a READ COMMITTED transaction",
                      "A transaction snapshot would never see the jobs pushed while it waits.",
                      "Wait in a READ COMMITTED transaction (the default isolation level), or "
                      "do not wait.");
    return us;
}

void wait_loop(const std::string& queue, int64_t wait_us, bool filtered,
               const std::function<bool()>& attempt) {
    Waiter waiter(queue, wait_us);
    // A push wakes one waiting pull per job. One with a kinds filter, woken for a job it may not
    // take, passes the wake-up on, or the pull that could take the job would find it only at its
    // next look.
    if (!subtransaction_callback_registered) {
        pg_guard([] { RegisterSubXactCallback(count_rollbacks, nullptr); });
        subtransaction_callback_registered = true;
    }
    for (;;) {
        waiter.arm();
        uint64_t rollbacks = rolled_back_subtransactions;
        if (attempt()) return;
        // An attempt that rolled a subtransaction back left the wait list: back on it, or the
        // sleep would return at once, and the pull try again and again for the whole wait.
        if (rolled_back_subtransactions != rollbacks) waiter.arm();
        // A transaction that holds a limited queue's lock (claims that keep it to commit: rate
        // limits, too many jobs in flight, a job it made available itself; or a limit it set),
        // by this pull or an earlier statement, must not sleep with it, whatever the queue
        // waited on: every other pull of that queue would wait for the whole wait.
        if (limits::holds_any()) return;
        if (filtered && waiter.woken()) waiter.pass_on_if_new();
        if (!waiter.sleep()) return;
    }
}

Waiter::Waiter(std::string queue, int64_t wait_us)
    : queue_(std::move(queue)), deadline_(GetCurrentTimestamp() + wait_us) {}

Waiter::~Waiter() {
    // Leaves the wait list; a signal received meanwhile goes on to the next waiting pull.
    if (armed_) ConditionVariableCancelSleep();
}

void Waiter::arm() {
    // The queue may have passed its slot on since the last attempt: look it up every time.
    claim_hint::Waiting w = claim_hint::waiting_pulls(queue_);
    // Counts of another slot say nothing of this one's.
    if (w.cv != cv_) passed_ = false;
    cv_ = w.cv;
    signals_ = w.signals;
    if (cv_ != nullptr) {
        ConditionVariablePrepareToSleep(cv_);
        armed_ = true;
    } else if (armed_) {
        ConditionVariableCancelSleep();
        armed_ = false;
    }
}

bool Waiter::sleep() {
    int64_t left = deadline_ - GetCurrentTimestamp();
    if (left <= 0) return false;
    int64_t us = std::min(left, cv_ != nullptr ? kRecheckUs : kUnannouncedUs);
    long ms = static_cast<long>(std::max<int64_t>(1, (us + 999) / 1000));
    if (cv_ == nullptr) {
        pg_guard([ms] {
            (void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms,
                            PG_WAIT_EXTENSION);
            ResetLatch(MyLatch);
            CHECK_FOR_INTERRUPTS();
        });
        return true;
    }
    ConditionVariable* cv = cv_;
    woken_ = pg_guard([cv, ms] {
        // A signal that came during the attempt has set the latch, but the attempt may have
        // reset it (waiting for a lock, say): set it again, so that the sleep looks at the wait
        // list first and returns at once if this pull was signaled.
        SetLatch(MyLatch);
        return !ConditionVariableTimedSleep(cv, ms, PG_WAIT_EXTENSION);  // true: timed out
    });
    if (woken_) woken_at_ = pg_atomic_read_u64(signals_);
    return true;
}

void Waiter::pass_on_if_new() {
    ConditionVariable* cv = cv_;
    if (cv == nullptr || (passed_ && passed_at_ == woken_at_)) return;
    passed_ = true;
    passed_at_ = woken_at_;
    pg_guard([cv] { ConditionVariableSignal(cv); });
}

}  // namespace hopper::pull_wait
