// The reaper's wake-up relay: pushes do not NOTIFY in their own transaction (that would serialize
// their commits, see notify.hpp); they set the reaper's latch at commit, and the reaper sends one
// NOTIFY "hopper:<queue>" per queue that received jobs, from a transaction with
// synchronous_commit off, so it holds PostgreSQL's notify lock for microseconds.
//
// How the reaper knows which jobs are new: job ids come from one sequence, but transactions commit
// in any order, so "ids above the highest one seen" would miss a job whose transaction took its id
// first and committed last. The relay therefore keeps a settled mark: every job whose id is at or
// below it and that committed has been seen by a relay scan. Each step reads the sequence's last
// value and the transactions that hold hopper.jobs for writing at that moment (every transaction
// that took a job id and has not ended is among them: it locked the table before taking the id);
// once those have all ended, that value is settled. A step scans the ids above the mark, which in
// steady operation are the jobs of the last few milliseconds.
#pragma once

namespace hopper::reaper {

// Before the reaper's first pass announces every queue with due jobs: sets the settled mark to
// the sequence's current value once the transactions that may hold lower ids have ended (waiting
// a few seconds at most), so the first pass covers everything below it.
void relay_prime();

// One relay step, in a transaction of its own: notifies the queues that have due available jobs
// above the settled mark, then advances the mark. Does nothing before relay_prime().
void relay_step();

// Between two batches of a long pass (a rescue storm can take seconds): a relay step if a push set
// the latch meanwhile, so that wake-ups do not wait for the pass to end. Never throws; a failure is
// logged as a WARNING.
void relay_if_woken();

}  // namespace hopper::reaper
