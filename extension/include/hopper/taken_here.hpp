// Jobs that queue_take removed in the current transaction, so that queue_fail_taken can put one
// back when its work failed but the transaction goes on.
//
// The pattern: take, SAVEPOINT, work; on failure ROLLBACK TO the savepoint (the work is undone,
// the take is not) and call queue_fail_taken in the same transaction. The job never leaves the
// taker's hands: its row version, deleted by this transaction, is read back and inserted again,
// the history row the take wrote is removed, and the failure is then recorded on it as usual.
// Rolling back the take itself instead frees the job, and another worker may take and run it
// before the failure is recorded.
//
// The take's "hopper:done" notices wait here too, until just before commit: a job put back is
// not announced as completed.
#pragma once

#include <cstdint>
#include <string>

#include "hopper/spi.hpp"

namespace hopper::taken_here {

// By queue_take, for every job it returns. If the queue announces finished jobs, "hopper:done"
// says it completed when the transaction commits, unless restore() put it back meanwhile (in a
// part of the transaction that was not rolled back).
void remember(int64_t id, const std::string& queue, bool queue_notifies_done);

// Puts job `id` back into hopper.jobs, available and as it was before the take, if this
// transaction took it and still has it out: the take was not rolled back, and no later command of
// the transaction finished the job (a job put back, then completed through a lease, cancelled or
// buried, stays finished). Returns false (and changes nothing) otherwise. A take rolled back to a
// savepoint counts as rolled back. Raises 23505, naming the holder, if a job this transaction
// pushed since the take holds the job's dedup key.
bool restore(spi::Connection& conn, int64_t id);

// By queue_fail_taken once it recorded a failure of job `id`, with the command id current when
// the call began. Forgotten if the subtransaction that recorded it rolls back.
void remember_failure(int64_t id, CommandId began);

// Whether this transaction recorded a failure of job `id` (and did not roll it back) since it
// last took the job, or at all if it never took it: a second queue_fail_taken for the same take
// (a client retrying a call whose reply it lost, two error handlers) must not count a second
// attempt.
bool failed_since_take(int64_t id);

}  // namespace hopper::taken_here
