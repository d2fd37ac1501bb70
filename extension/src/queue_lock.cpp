// See include/hopper/queue_lock.hpp.
#include "hopper/queue_lock.hpp"

#include "hopper/boundary.hpp"

extern "C" {
#include "miscadmin.h"
#include "catalog/pg_collation.h"
#include "utils/builtins.h"
}

namespace hopper::queue_lock {

uint32 hash(const std::string& queue) {
    return pg_guard([&] {
        text* name = cstring_to_text_with_len(queue.data(), static_cast<int>(queue.size()));
        auto h = static_cast<uint32>(DatumGetInt32(
            DirectFunctionCall1Coll(hashtext, DEFAULT_COLLATION_OID, PointerGetDatum(name))));
        pfree(name);
        return h;
    });
}

LOCKTAG tag(uint32 key1, uint32 hash) {
    LOCKTAG t;
    SET_LOCKTAG_ADVISORY(t, MyDatabaseId, key1, hash, kTagField4);
    return t;
}

LockAcquireResult acquire(const LOCKTAG& tag, LOCKMODE mode, bool dont_wait) {
    return pg_guard(
        [&] { return LockAcquire(&tag, mode, /*sessionLock=*/false, /*dontWait=*/dont_wait); });
}

}  // namespace hopper::queue_lock
