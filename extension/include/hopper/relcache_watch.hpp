// One relcache invalidation callback for all of hopper's per-backend memories (the queues a
// backend pushed to, the queue rows its claims read, the index descriptions it keeps, the queues it
// saw packed). PostgreSQL gives a backend ten such callbacks for every library it loads together
// and ends the session with a FATAL error when they run out.
//
// Plain C over PostgreSQL's API: call under pg_guard. A subscriber runs inside PostgreSQL's
// invalidation processing, so it may only mark or drop its own memory.
#pragma once

extern "C" {
#include "postgres.h"
}

namespace hopper::relcache_watch {

// Called with the relation whose relcache entry is invalidated, or InvalidOid for all of them.
using Subscriber = void (*)(Oid relid);

// Adds `s` once; later calls with the same subscriber do nothing.
void subscribe(Subscriber s);

}  // namespace hopper::relcache_watch
