// The jobs that limited claims have taken in transactions still in progress, so that a limited
// queue's lock can be let go when its claim is made instead of when the claimer commits.
//
// A limited claim counts the queue's running jobs from the rows (include/hopper/limits.hpp), and
// another transaction's claims stay invisible until it commits. Holding the queue's lock through
// each claimer's commit made that safe and serialized the claims with the commits: a limited
// queue claimed 0.14x of an unlimited one. Instead, each claimer records the ids it took here
// before it lets the lock go, and the next claimer, under the lock, reads them before its
// statement takes its snapshot: a job in the list that the snapshot still shows available is
// one of those claims and counts as running; one the snapshot shows otherwise was committed (or
// finished) and is counted from its row. An entry leaves the list after its transaction's commit
// has become visible (the commit callback runs after that), so no claim is ever missed by both;
// one that leaves later (an abort) only counts a job once too often for a moment.
//
// Each backend owns one entry of a dynamic shared memory segment; a transaction whose claims do
// not fit (kMaxIds), or a backend without the segment, keeps the lock to its commit as before.
// A rolled-back subtransaction takes its claims out, and a rollback wakes pulls waiting for the
// slots it freed. PREPARE TRANSACTION is refused after any
// pull from a limited queue: an entry cannot outlive the backend's transaction, and a lock kept
// to commit (rate limits, claims that did not fit) would pass to the prepared transaction and
// hold every pull of the queue until someone ends it.
//
// Call from C++: the functions guard their own calls into PostgreSQL (errors come as PgError).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

extern "C" {
#include "postgres.h"
}

namespace hopper::inflight_claims {

// Most claimed jobs a transaction can record.
constexpr int kMaxIds = 64;

// Appends to `ids` the jobs recorded by other backends of this database for queues whose name
// hashes to `queue_hash` (hashtext).
void read(uint32 queue_hash, std::vector<int64_t>* ids);

// Marks this transaction as one that pulled from a limited queue, which cannot be prepared.
void mark_limited_pull();

// Notes that this transaction (in its current subtransaction) claimed `jobs` jobs of limited
// `queue`, whether or not they are recorded in flight: if that rolls back, their slots are free
// again and as many pulls waiting on the queue are woken (pull_wait.hpp).
void claimed(const std::string& queue, int64_t jobs);

// Records the jobs this transaction claimed; false (nothing recorded) if there is no room.
bool add(uint32 queue_hash, const std::vector<int64_t>& ids);

}  // namespace hopper::inflight_claims
