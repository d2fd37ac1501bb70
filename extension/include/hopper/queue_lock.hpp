// The advisory locks hopper takes per queue (pushes against a drop, the packed mark's, a limited
// queue's claims'): locktype advisory, classid key1, objid hashtext(queue), and objsubid
// kTagField4. pg_advisory_lock() and its kin, which every role may call, tag their locks objsubid
// 1 (one int8 key) or 2 (two int4 keys): a tag they can make would let any role allowed to connect
// hold a queue's lock and so hold up its pushes, pulls and administration. Queues whose names hash
// alike share a lock.
#pragma once

#include <string>

extern "C" {
#include "postgres.h"
#include "storage/lock.h"
}

namespace hopper::queue_lock {

// The last field of every advisory lock tag hopper makes (pg_locks.objsubid): neither 1 nor 2,
// the values SQL's advisory lock functions use; "hp".
constexpr uint16 kTagField4 = 0x6870;

// hashtext(queue), as the SQL form computes it.
uint32 hash(const std::string& queue);

// The tag in this database for classid key1 and a queue name hashing to `hash`.
LOCKTAG tag(uint32 key1, uint32 hash);

// Takes the lock `tag` in `mode` to the end of the transaction. LOCKACQUIRE_NOT_AVAIL only with
// dont_wait; LOCKACQUIRE_ALREADY_HELD if this transaction held it already.
LockAcquireResult acquire(const LOCKTAG& tag, LOCKMODE mode, bool dont_wait = false);

}  // namespace hopper::queue_lock
