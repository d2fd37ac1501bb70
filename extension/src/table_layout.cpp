// See include/hopper/table_layout.hpp.
#include <cstring>

#include "hopper/direct_access.hpp"
#include "hopper/relcache_watch.hpp"
#include "hopper/table_layout.hpp"

extern "C" {
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/syscache.h"
}

namespace hopper::table_layout {
namespace {

// A backend uses a handful: the tables' OIDs, hopper.jobs' columns for claims and for
// completions, hopper.queues', the history's map. Past this many the memory starts over.
constexpr int kMaxEntries = 16;

struct Entry {
    const void* key;
    Oid rels[kMaxRelations];
    int nrels;
    int n;
    int values[kMaxValues];
};

Entry entries[kMaxEntries];
int n_entries = 0;
// Moves whenever the backend forgets.
uint64 generation_now = 0;
bool subscribed = false;

void on_relcache_invalidation(Oid relid) {
    if (relid == InvalidOid) return forget();
    for (int i = 0; i < n_entries; ++i)
        for (int r = 0; r < entries[i].nrels; ++r)
            if (entries[i].rels[r] == relid) return forget();
}

void on_namespace_change(Datum, int, uint32) {
    forget();
}

void subscribe() {
    if (subscribed) return;
    relcache_watch::subscribe(on_relcache_invalidation);
    CacheRegisterSyscacheCallback(NAMESPACEOID, on_namespace_change, (Datum)0);
    subscribed = true;
}

Entry* find(const void* key, Oid relid) {
    for (int i = 0; i < n_entries; ++i)
        if (entries[i].key == key && entries[i].rels[0] == relid) return &entries[i];
    return nullptr;
}

}  // namespace

bool recall(const void* key, Oid relid, int* values, int n) {
    subscribe();
    Entry* e = find(key, relid);
    if (e == nullptr || e->n != n) return false;
    std::memcpy(values, e->values, sizeof(int) * n);
    return true;
}

uint64 generation() {
    subscribe();
    return generation_now;
}

void forget() {
    n_entries = 0;
    ++generation_now;
}

void remember(const void* key, const Oid* rels, int nrels, const int* values, int n, uint64 since) {
    if (n > kMaxValues || nrels < 1 || nrels > kMaxRelations || since != generation_now) return;
    Entry* e = find(key, rels[0]);
    if (e == nullptr) {
        if (n_entries == kMaxEntries) n_entries = 0;
        e = &entries[n_entries++];
    }
    e->key = key;
    std::memcpy(e->rels, rels, sizeof(Oid) * nrels);
    e->nrels = nrels;
    e->n = n;
    std::memcpy(e->values, values, sizeof(int) * n);
}

bool typed(Form_pg_attribute att, Oid type) {
    return !att->attisdropped && (type == InvalidOid || att->atttypid == type) &&
           att->atttypmod == -1;
}

bool attnums(Relation rel, const char* const* names, const Oid* types, int n, int* out) {
    Oid relid = RelationGetRelid(rel);
    if (!recall(names, relid, out, n)) {
        uint64 since = generation();
        TupleDesc desc = RelationGetDescr(rel);
        for (int c = 0; c < n; ++c) {
            out[c] = direct_access::attnum_of(desc, names[c]);
            if (out[c] != 0 && !typed(TupleDescAttr(desc, out[c] - 1), types[c])) out[c] = 0;
        }
        remember(names, &relid, 1, out, n, since);
    }
    for (int c = 0; c < n; ++c)
        if (out[c] == 0) return false;
    return true;
}

}  // namespace hopper::table_layout
