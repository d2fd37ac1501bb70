// See include/hopper/relcache_watch.hpp.
#include "hopper/relcache_watch.hpp"

extern "C" {
#include "utils/inval.h"
}

namespace hopper::relcache_watch {
namespace {

// hopper's modules that remember relation facts: fixed at build time, so a full list is a bug.
constexpr int kMaxSubscribers = 8;
Subscriber subscribers[kMaxSubscribers];
int n_subscribers = 0;
bool registered = false;

void on_relcache_invalidation(Datum, Oid relid) {
    for (int i = 0; i < n_subscribers; ++i) subscribers[i](relid);
}

}  // namespace

void subscribe(Subscriber s) {
    for (int i = 0; i < n_subscribers; ++i)
        if (subscribers[i] == s) return;
    if (n_subscribers == kMaxSubscribers) elog(ERROR, "hopper: too many relcache subscribers");
    if (!registered) {
        CacheRegisterRelcacheCallback(on_relcache_invalidation, (Datum)0);
        registered = true;
    }
    subscribers[n_subscribers++] = s;
}

}  // namespace hopper::relcache_watch
