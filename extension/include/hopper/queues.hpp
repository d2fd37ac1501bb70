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

// As require, and returns the earliest finished_at that the queue's retention keeps, reckoned
// from the clock (clock_timestamp()) as the reaper reckons its cutoff from its own: the history
// of the queue that its reads (queue_stats, queue_jobs) look at. Passed to them as a parameter,
// so that each call's plan leaves out the days before it (partition pruning), where a bound
// read from hopper.queues inside the statement would be known only once the partitions of every
// day were planned, locked and opened.
TimestampTz history_kept_since(spi::Connection& conn, const std::string& queue);

// Whether `queue` exists, as a statement of the caller's would see it (its policies and
// privileges apply); the second form connects to SPI itself, callable inside another connection.
bool exists(spi::Connection& conn, const std::string& queue);
bool exists(const std::string& queue);

// A job written into a queue by a transaction still in flight is invisible to queue_drop's
// deletes, and would outlive the queue once both commit. So everything that adds jobs to a queue
// (pushes, retries, queue_fail_taken's put-back) holds the queue's lock shared to the end of its
// transaction, and queue_drop holds it exclusively: a drop waits for the pushes in flight, and a
// push that waited for a drop finds the queue gone (and makes it again, if
// hopper.auto_create_queues is on). The lock is an advisory lock (kLockKey1,
// hashtext(queue); see queue_lock.hpp); queues whose names hash alike share it.
constexpr uint32_t kLockKey1 = 0x686f7071;  // "hopq"

// A transaction that pushes to many queues would hold a lock per queue, from the server's shared
// lock table, where every session's locks live: past kQueuesLockedAlone queues it holds one lock
// for all the others instead, (kEveryQueueLockKey1, 0) in RowExclusiveLock mode, which drops take
// in ShareLock mode beside their queue's own. Such a transaction holds up every drop while it
// lasts; pushes to a few queues hold up only their queues' drops.
constexpr int kQueuesLockedAlone = 16;
constexpr uint32_t kEveryQueueLockKey1 = 0x686f7051;  // "hopQ"

// Takes the shared lock before the pusher looks the queue up. A transaction snapshot (REPEATABLE
// READ, SERIALIZABLE) taken before a drop committed would still show the queue: there its row is
// locked too, which reports such a drop as a serialization failure. Without `wait`, returns false
// instead of waiting for a drop: for a pusher holding rows that the drop deletes (a schedule run
// holds its schedules', which go with their queue), where waiting would deadlock.
bool hold(spi::Connection& conn, const std::string& queue, bool wait = true);

// For queue_drop, before it changes anything: the exclusive lock (pushes in flight finish first,
// new ones wait), then lock_deletes.
void hold_exclusively(const std::string& queue);

// For queue_drop and queue_purge: two of them on one queue would delete the same rows in different
// orders and deadlock, so they run one after the other (advisory lock kDeleteLockKey1,
// hashtext(queue)). Pushes do not wait for it: a purge removes what was waiting when it ran. Takes
// the claims' lock of a limited queue (limits::lock) after it.
constexpr uint32_t kDeleteLockKey1 = 0x686f7064;  // "hopd"
void lock_deletes(const std::string& queue);

}  // namespace hopper::queues
