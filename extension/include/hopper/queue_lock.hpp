// The advisory locks hopper takes per queue (the packed mark's, a limited queue's claims'): the
// tag of pg_advisory_xact_lock(key1, hashtext(queue)), so that pg_locks shows them as ordinary
// two-int4 advisory locks (objsubid 2). Queues whose names hash alike share a lock.
#pragma once

#include <string>

extern "C" {
#include "postgres.h"
#include "storage/lock.h"
}

namespace hopper::queue_lock {

// hashtext(queue), as the SQL form computes it.
uint32 hash(const std::string& queue);

// The tag in this database for classid key1 and a queue name hashing to `hash`.
LOCKTAG tag(uint32 key1, uint32 hash);

// Takes the lock `tag` in `mode` to the end of the transaction. LOCKACQUIRE_NOT_AVAIL only with
// dont_wait; LOCKACQUIRE_ALREADY_HELD if this transaction held it already.
LockAcquireResult acquire(const LOCKTAG& tag, LOCKMODE mode, bool dont_wait = false);

}  // namespace hopper::queue_lock
