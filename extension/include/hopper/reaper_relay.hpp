// The reaper's wake-up relay: pushes do not NOTIFY in their own transaction (that would serialize
// their commits, see notify.hpp). A push that commits due jobs counts a wake-up in its queue's
// claim-hint slot and sets the reaper's latch (push_wakeup.cpp); the reaper sends one
// NOTIFY "hopper:<queue>" per queue whose count moved, from a transaction with synchronous_commit
// off, so it holds PostgreSQL's notify lock for microseconds. The counts live in shared memory,
// so a step reads no table and costs the same with ten jobs waiting or ten million; and the count
// is made after the push's commit, whatever order transactions commit in.
#pragma once

extern "C" {
#include "postgres.h"
#include "datatype/timestamp.h"
}

namespace hopper::reaper {

// Before the reaper's first pass announces every queue with due jobs: reads the counts, so that
// the relay reports only wake-ups counted after the first pass looked.
void relay_prime();

// One relay step: notifies the queues whose wake-up counts moved, in a transaction of its own.
// Returns whether it notified any. Does nothing before relay_prime(). A step that notified starts
// a pause of hopper.notify_relay_interval (relay_paced_until), so that a stream of pushes is
// announced in steps of several pushes, not one step per push.
bool relay_step();

// The end of the pause after the last step that notified (0 before any): no step before then.
// Kept across naps and passes, so that a pass ending does not cut a pause short.
TimestampTz relay_paced_until();

// Between two batches of a long pass (a rescue storm can take seconds): a relay step if a push set
// the latch meanwhile and the pause is over, so that wake-ups do not wait for the pass to end.
// Within the pause the latch stays set for the nap after the pass. Never throws; a failure is
// logged as a WARNING.
void relay_if_woken();

}  // namespace hopper::reaper
