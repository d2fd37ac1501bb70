// Concurrency slots and rate limits: what queue_pull does differently for a queue with limits.
//
// A limited queue's claims are serialized by a transaction-level advisory lock on the queue. Under
// READ COMMITTED each statement takes its snapshot after the lock is granted, so a claim sees every
// claim committed before it and counts running jobs from the live rows: complete, fail, release,
// cancel and rescue free a slot just by changing the row, with no counter that could drift. The
// lock is held until the puller's transaction ends, since its claims are invisible to others
// until then.
#pragma once

#include <cstdint>
#include <string>

#include "hopper/spi.hpp"

namespace hopper::limits {

// The advisory lock of a limited queue: two-int4 form (pg_locks objsubid 2), classid kLockKey1,
// objid hashtext(queue). Its classid differs from the reaper's (reaper::kLockKey1), so the two
// key spaces cannot clash; queues whose names hash alike merely share a lock.
constexpr uint32_t kLockKey1 = 0x686f706c;  // "hopl"

// Most running jobs (queue-wide or per key) and claims per period a limit may allow.
constexpr int32_t kMaxLimit = 1000000;

// Called when queue_pull found the queue limited: true if it still has limits and is not paused,
// after taking its lock (refused under REPEATABLE READ and SERIALIZABLE, whose snapshot predates
// the lock). Then claim_statement() must claim instead, once any packed jobs (`packed`: the
// queue's mark, include/hopper/batches.hpp) are rows.
bool enter(spi::Connection& conn, const std::string& queue, bool* packed);

// The serialized claim, with the same parameters and result columns as queue_pull's own.
spi::Statement& claim_statement();

// The parameters of both claim statements, which queue_pull binds in one place: queue, at, n,
// lease, kinds, worker, claimer pid, claimer backend start, session_bound.
#define HOPPER_CLAIM_PARAM_TYPES                                                       \
    {                                                                                  \
        TEXTOID, TIMESTAMPTZOID, INT8OID, INTERVALOID, TEXTARRAYOID, TEXTOID, INT4OID, \
            TIMESTAMPTZOID, BOOLOID                                                    \
    }

// For the functions that change limits: locks the queue's row (P0002 if it does not exist), so
// that changes to one queue's limits are serialized and the next statements see each other's.
void lock_queue(spi::Connection& conn, const std::string& queue);
// Recomputes hopper.queues.limited from the queue's settings, overrides and buckets.
void refresh_limited(spi::Connection& conn, const std::string& queue);

}  // namespace hopper::limits
