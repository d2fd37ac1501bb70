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
// then tries again anyway, for what announces nothing (a key whose running jobs finished, a
// resumed queue's pass, a queue without a slot, a signal lost with a session that was cancelled).
#pragma once

#include <string>

extern "C" {
#include "postgres.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "storage/condition_variable.h"
}

namespace hopper::pull_wait {

// The wait argument n of `function` (queue_pull, queue_take) in microseconds: 0 for NULL or no
// wait. Refused (0A000) in a transaction whose snapshot would never see the jobs waited for.
int64_t wait_us(FunctionCallInfo fcinfo, int n, const char* function);

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

  private:
    std::string queue_;
    TimestampTz deadline_;
    ConditionVariable* cv_ = nullptr;
    bool armed_ = false;  // on a condition variable's wait list
};

}  // namespace hopper::pull_wait
