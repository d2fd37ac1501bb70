// queue_pull's wait: a pull that finds no job sleeps until one is made available on its queue,
// or the wait runs out.
//
// Every wake-up of a queue (a push, a release, a retry, the reaper's pass when delayed jobs fall
// due: whatever sends NOTIFY "hopper:<queue>") also signals the condition variable of the queue's
// claim-hint slot when its transaction commits, once per job it made available (claim_hint.hpp).
// A waiting pull registers on that variable before each claim attempt, so a job committed after
// the attempt's snapshot was taken wakes it, and it sleeps only after an attempt found nothing.
// A signal that reaches a pull as it leaves with other jobs is passed on to the next one
// (PostgreSQL's ConditionVariableCancelSleep does that). Sleeps last a second at most: the pull
// then tries again anyway, for what announces nothing (a job put back by a direct UPDATE, a push in
// a prepared transaction, a signal lost with a session that was cancelled as it was woken, or
// with an attempt that rolled back a subtransaction, which takes the pull off the wait list); a
// queue without a slot, which nothing can wake, is looked at every 100 ms.
#pragma once

#include <functional>
#include <string>
#include <utility>

extern "C" {
#include "postgres.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
}

namespace hopper::pull_wait {

// The wait argument n of `function` (queue_pull, queue_take) in microseconds: 0 for NULL or no
// wait. Refused (0A000) in a transaction whose snapshot would never see the jobs waited for.
int64_t wait_us(FunctionCallInfo fcinfo, int n, const char* function);

// With wait_us > 0: runs attempt until it returns true (it claimed jobs, or its queue may not
// wait) or the wait runs out, sleeping between attempts until the queue is woken. It never
// sleeps while the transaction holds a limited queue's lock (limits::holds_any()): it returns.
// `filtered`: the pull takes only some kinds, so a wake-up it cannot use is passed on.
void wait_loop(const std::string& queue, int64_t wait_us, bool filtered,
               const std::function<bool()>& attempt);

// Runs attempt once, or waits as wait_loop does. A pull that does not wait (the common one) goes
// straight to attempt, without building a std::function.
template <typename F>
void attempt_until_done(const std::string& queue, int64_t wait_us, bool filtered, F&& attempt) {
    if (wait_us == 0)
        attempt();
    else
        wait_loop(queue, wait_us, filtered, std::forward<F>(attempt));
}

}  // namespace hopper::pull_wait
