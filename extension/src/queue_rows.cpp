// See include/hopper/queue_rows.hpp.
#include <cstring>

#include "hopper/queue_defaults.hpp"
#include "hopper/queue_rows.hpp"
#include "hopper/relcache_watch.hpp"

extern "C" {
#include "utils/inval.h"
}

namespace hopper::queue_rows {
namespace {

// A worker serves a few queues; a backend that reads more than this many starts over. Longer
// names are read each time (queue names are rarely long).
constexpr int kMaxRows = 32;
constexpr int kMaxName = 64;

struct Row {
    int len;
    char name[kMaxName];
    direct_access::QueueRow q;
};

Row rows[kMaxRows];
int n_rows = 0;
// hopper.queues as last read (InvalidOid: nothing remembered).
Oid queues_relid = InvalidOid;
// Moves with every invalidation that reaches this backend.
uint64_t generation_now = 0;
bool callback_registered = false;

void on_relcache_invalidation(Oid relid) {
    // Every invalidation moves the generation, not only those of hopper.queues as last read: with
    // nothing remembered that table is unknown here, and its invalidation can arrive in the middle
    // of a lookup (the lock taken on it) whose snapshot was taken before the change committed.
    ++generation_now;
    if (relid == InvalidOid || relid == queues_relid) {
        n_rows = 0;
        queues_relid = InvalidOid;
    }
}

}  // namespace

uint64_t accept() {
    if (!callback_registered) {
        relcache_watch::subscribe(on_relcache_invalidation);
        callback_registered = true;
    }
    AcceptInvalidationMessages();
    return generation_now;
}

bool recall(const char* name, int len, direct_access::QueueRow* q) {
    for (int i = 0; i < n_rows; ++i)
        if (rows[i].len == len && std::memcmp(rows[i].name, name, len) == 0) {
            *q = rows[i].q;
            return true;
        }
    return false;
}

void remember(Oid queues, const char* name, int len, const direct_access::QueueRow& q,
              uint64_t generation) {
    if (!q.found || len > kMaxName) return;
    // Asked before the generation: reading the triggers may rebuild the relcache entry.
    if (!queue_defaults::changes_reach_backends(queues) || generation != generation_now) return;
    if (queues_relid != queues) n_rows = 0;
    if (n_rows == kMaxRows) n_rows = 0;
    queues_relid = queues;
    Row& row = rows[n_rows++];
    row.len = len;
    std::memcpy(row.name, name, len);
    row.q = q;
}

bool lookup(Oid queues, const char* name, int len, Datum name_text, Snapshot snap,
            uint64_t generation, direct_access::QueueRow* q) {
    if (recall(name, len, q)) return true;
    direct_access::QueueTable table;
    if (!direct_access::open_queues(queues, &table)) return false;
    direct_access::read_queue(table, name_text, snap, q);
    direct_access::close_queues(&table);
    remember(queues, name, len, *q, generation);
    return true;
}

}  // namespace hopper::queue_rows
