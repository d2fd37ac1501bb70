// The one-reaper-per-database advisory lock; see include/hopper/reaper.hpp.
#include "hopper/reaper.hpp"
#include "hopper/queue_lock.hpp"

extern "C" {
#include "catalog/pg_database_d.h"
#include "miscadmin.h"
#include "storage/lock.h"
}

namespace hopper::reaper {
namespace {

LOCKTAG reaper_tag(uint32_t key2 = kLockKey2) {
    LOCKTAG tag;
    // An advisory lock, visible (and documented) in pg_locks, whose objsubid no SQL function can
    // take: otherwise any role allowed to connect could hold it and keep every reaper out.
    SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, kLockKey1, key2, queue_lock::kTagField4);
    return tag;
}

bool try_session_lock(const LOCKTAG& tag) {
    LockAcquireResult r = pg_guard(
        [&] { return LockAcquire(&tag, ExclusiveLock, /*sessionLock=*/true, /*dontWait=*/true); });
    return r != LOCKACQUIRE_NOT_AVAIL;
}

bool is_held(const LOCKTAG& tag) {
    LockAcquireResult r = pg_guard(
        [&] { return LockAcquire(&tag, ExclusiveLock, /*sessionLock=*/true, /*dontWait=*/true); });
    if (r == LOCKACQUIRE_NOT_AVAIL) return true;
    // Free: give it straight back. (ALREADY_HELD means this very session holds it; it keeps its
    // own hold, and no other session can be the reaper then either.)
    pg_guard([&] { LockRelease(&tag, ExclusiveLock, /*sessionLock=*/true); });
    return r == LOCKACQUIRE_ALREADY_HELD;
}

}  // namespace

bool try_lock_for_session() {
    return try_session_lock(reaper_tag());
}

bool lock_is_held() {
    return is_held(reaper_tag());
}

bool try_lock_starting() {
    return try_session_lock(reaper_tag(kStartingKey2));
}

void unlock_starting() {
    LOCKTAG tag = reaper_tag(kStartingKey2);
    pg_guard([&] { LockRelease(&tag, ExclusiveLock, /*sessionLock=*/true); });
}

bool starting_is_held() {
    return is_held(reaper_tag(kStartingKey2));
}

bool database_wanted() {
    // The lock every new connection takes on its database while it starts (RowExclusiveLock on
    // the pg_database object), tried without waiting and given straight back.
    LOCKTAG tag;
    SET_LOCKTAG_OBJECT(tag, InvalidOid, DatabaseRelationId, MyDatabaseId, 0);
    LockAcquireResult r = pg_guard([&] {
        return LockAcquire(&tag, RowExclusiveLock, /*sessionLock=*/false, /*dontWait=*/true);
    });
    if (r == LOCKACQUIRE_NOT_AVAIL) return true;
    pg_guard([&] { LockRelease(&tag, RowExclusiveLock, /*sessionLock=*/false); });
    return false;
}

}  // namespace hopper::reaper
