// Queue lookups used by the job functions.
#pragma once

#include <string>

#include "hopper/spi.hpp"

namespace hopper::queues {

// Makes sure `queue` exists: creates it with default settings when hopper.auto_create_queues is on,
// otherwise raises P0002.
void ensure(spi::Connection& conn, const std::string& queue);

// Raises P0002 unless `queue` exists.
void require(spi::Connection& conn, const std::string& queue);

// A job written into a queue by a transaction still in flight is invisible to queue_drop's
// deletes, and would outlive the queue once both commit. So everything that adds jobs to a queue
// (pushes, retries, queue_fail_taken's put-back) holds the queue's lock shared to the end of its
// transaction, and queue_drop and queue_purge hold it exclusively: a drop waits for the pushes in
// flight, and a push that waited for a drop finds the queue gone (and makes it again, if
// hopper.auto_create_queues is on). The lock is the two-int4 advisory lock (kLockKey1,
// hashtext(queue)); queues whose names hash alike share it.
constexpr uint32_t kLockKey1 = 0x686f7071;  // "hopq"

// Takes the shared lock before the pusher looks the queue up. A transaction snapshot (REPEATABLE
// READ, SERIALIZABLE) taken before a drop committed would still show the queue: there its row is
// locked too, which reports such a drop as a serialization failure.
void hold(spi::Connection& conn, const std::string& queue);

// Takes the exclusive lock: for queue_drop and queue_purge, before they change anything (two of
// them on one queue then run one after the other instead of deadlocking on its rows).
void hold_exclusively(const std::string& queue);

}  // namespace hopper::queues
