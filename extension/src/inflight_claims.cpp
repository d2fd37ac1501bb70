// See include/hopper/inflight_claims.hpp.
#include "hopper/inflight_claims.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

#include "hopper/boundary.hpp"
#include "hopper/claim_hint.hpp"

extern "C" {
#include "miscadmin.h"
#include "access/xact.h"
#include "port/atomics.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
}

namespace hopper::inflight_claims {
namespace {

struct Item {
    uint32 queue;  // hashtext of the queue's name
    SubTransactionId subxact;
    int64_t id;
};

// One backend's claims, written only by that backend.
struct Entry {
    slock_t mutex;
    // Items in use. Others read it without the mutex to pass over empty entries: a claimer
    // writes it before it lets its queue's lock go, and a reader reads it after taking that lock.
    pg_atomic_uint32 count;
    Oid db;
    Item items[kMaxIds];
};

struct Shared {
    int entries;  // MaxBackends, indexed by backend id - 1
    Entry entry[FLEXIBLE_ARRAY_MEMBER];
};

// Sized by MaxBackends, which the main segment cannot be relied on to have spare when hopper is
// not preloaded: a dynamic segment pinned for the life of the server, its handle in the main one.
struct Anchor {
    dsm_handle handle;
};

Shared* shared = nullptr;
// Remembered one by one, so that a registration that failed (out of memory) is retried alone.
bool xact_registered = false;
bool subxact_registered = false;
// The outermost subtransaction of this transaction that pulled from a limited queue, if any.
SubTransactionId limited_pull_since = InvalidSubTransactionId;

// The jobs this transaction claimed from limited queues, per queue and subtransaction: a rollback
// of that subtransaction (or of the transaction) frees their slots, which must wake as many
// pulls waiting on the queue as a completion of each would.
struct Claims {
    std::string queue;
    SubTransactionId subxact;
    int64_t jobs;
};
std::vector<Claims> claims;

// Wakes the pulls waiting for the slots of the claims made in subtransaction `since` or in those
// it contained (assigned later ids), and forgets those claims; every claim if `since` is invalid.
// Called once the rollback is visible: the rows are available again, and the entries of the
// in-flight list gone.
void wake_for_rolled_back(SubTransactionId since) noexcept {
    if (claims.empty()) return;
    auto undone = [&](const Claims& c) {
        return since == InvalidSubTransactionId || c.subxact >= since;
    };
    if (std::none_of(claims.begin(), claims.end(), undone)) return;
    // The hints first: a pull woken before they come down would resume past the jobs.
    claim_hint::apply_at_rollback();
    for (const Claims& c : claims)
        if (undone(c)) claim_hint::wake_waiting_pulls(c.queue, c.jobs);
    claims.erase(std::remove_if(claims.begin(), claims.end(), undone), claims.end());
}

Entry* own_entry() {
    if (shared == nullptr || MyBackendId < 1 || MyBackendId > shared->entries) return nullptr;
    return &shared->entry[MyBackendId - 1];
}

void clear_own() {
    Entry* e = own_entry();
    if (e == nullptr || pg_atomic_read_u32(&e->count) == 0) return;
    SpinLockAcquire(&e->mutex);
    pg_atomic_write_u32(&e->count, 0);
    SpinLockRelease(&e->mutex);
}

void clear_on_exit(int, Datum) {
    clear_own();
}

// The claims leave the list once the commit is visible: PostgreSQL calls XACT_EVENT_COMMIT after
// the transaction left the proc array.
void on_xact(XactEvent event, void*) {
    switch (event) {
        case XACT_EVENT_COMMIT:
        case XACT_EVENT_PARALLEL_COMMIT:
        case XACT_EVENT_PARALLEL_ABORT:
        case XACT_EVENT_PREPARE:
            clear_own();
            claims.clear();
            limited_pull_since = InvalidSubTransactionId;
            break;
        case XACT_EVENT_ABORT:
            // PostgreSQL calls it after the transaction left the proc array: its claims are
            // undone for everyone.
            clear_own();
            wake_for_rolled_back(InvalidSubTransactionId);
            limited_pull_since = InvalidSubTransactionId;
            break;
        case XACT_EVENT_PRE_PREPARE: {
            Entry* e = own_entry();
            if (limited_pull_since != InvalidSubTransactionId ||
                (e != nullptr && pg_atomic_read_u32(&e->count) > 0))
                ereport(ERROR,
                        (errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
                         errmsg("cannot PREPARE a transaction that has pulled from a queue with "
                                "concurrency limits"),
                         errdetail("Its claims are counted by its session, which a prepared "
                                   "transaction outlives."),
                         errhint("Pull from limited queues in a transaction of its own.")));
            break;
        }
        default:
            break;
    }
}

// A rolled-back subtransaction's claims are undone: so are their entries, and those of the
// subtransactions it contained (assigned later ids).
// PostgreSQL calls it after marking the subtransaction aborted: its claims are undone for everyone.
void on_subxact(SubXactEvent event, SubTransactionId mine, SubTransactionId, void*) {
    if (event != SUBXACT_EVENT_ABORT_SUB) return;
    if (limited_pull_since >= mine) limited_pull_since = InvalidSubTransactionId;
    Entry* e = own_entry();
    if (e != nullptr && pg_atomic_read_u32(&e->count) > 0) {
        SpinLockAcquire(&e->mutex);
        uint32 n = pg_atomic_read_u32(&e->count), kept = 0;
        for (uint32 i = 0; i < n; ++i)
            if (e->items[i].subxact < mine) e->items[kept++] = e->items[i];
        pg_atomic_write_u32(&e->count, kept);
        SpinLockRelease(&e->mutex);
    }
    wake_for_rolled_back(mine);
}

size_t segment_size(int entries) {
    return offsetof(Shared, entry) + sizeof(Entry) * static_cast<size_t>(entries);
}

// This backend's view of the segment; created if `create` and nobody has made it yet. nullptr:
// there is none (so no backend has recorded anything), or it could not be made.
Shared* attach(bool create) {
    if (shared != nullptr) return shared;
    return pg_guard([create]() -> Shared* {
        bool found = false;
        LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
        auto* anchor = static_cast<Anchor*>(
            ShmemInitStruct("hopper in-flight claims v1", sizeof(Anchor), &found));
        if (!found) anchor->handle = DSM_HANDLE_INVALID;
        bool exists = anchor->handle != DSM_HANDLE_INVALID;
        dsm_segment* seg = nullptr;
        if (exists) {
            seg = dsm_attach(anchor->handle);
        } else if (create) {
            seg = dsm_create(segment_size(MaxBackends), DSM_CREATE_NULL_IF_MAXSEGMENTS);
            if (seg != nullptr) {
                auto* s = static_cast<Shared*>(dsm_segment_address(seg));
                s->entries = MaxBackends;
                for (int i = 0; i < MaxBackends; ++i) {
                    SpinLockInit(&s->entry[i].mutex);
                    pg_atomic_init_u32(&s->entry[i].count, 0);
                    s->entry[i].db = InvalidOid;
                }
                dsm_pin_segment(seg);
                anchor->handle = dsm_segment_handle(seg);
            }
        }
        LWLockRelease(AddinShmemInitLock);
        // Others may have recorded claims there: counting without them could exceed a limit.
        if (exists && seg == nullptr)
            ereport(ERROR, (errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
                            errmsg("hopper: cannot attach the in-flight claims segment")));
        if (seg == nullptr) return nullptr;
        dsm_pin_mapping(seg);
        shared = static_cast<Shared*>(dsm_segment_address(seg));
        before_shmem_exit(clear_on_exit, 0);
        return shared;
    });
}

}  // namespace

void read(uint32 queue_hash, std::vector<int64_t>* ids) {
    if (attach(false) == nullptr) return;
    Entry* own = own_entry();
    int64_t found[kMaxIds];
    for (int i = 0; i < shared->entries; ++i) {
        Entry& e = shared->entry[i];
        if (&e == own || pg_atomic_read_u32(&e.count) == 0) continue;
        int k = 0;
        SpinLockAcquire(&e.mutex);
        uint32 n = pg_atomic_read_u32(&e.count);
        if (e.db == MyDatabaseId)
            for (uint32 j = 0; j < n; ++j)
                if (e.items[j].queue == queue_hash) found[k++] = e.items[j].id;
        SpinLockRelease(&e.mutex);
        ids->insert(ids->end(), found, found + k);
    }
}

namespace {

void register_callbacks() {
    if (subxact_registered) return;
    pg_guard([] {
        if (!xact_registered) {
            RegisterXactCallback(on_xact, nullptr);
            xact_registered = true;
        }
        RegisterSubXactCallback(on_subxact, nullptr);
        subxact_registered = true;
    });
}

}  // namespace

void mark_limited_pull() {
    register_callbacks();
    if (limited_pull_since == InvalidSubTransactionId)
        limited_pull_since = pg_guard([] { return GetCurrentSubTransactionId(); });
}

void claimed(const std::string& queue, int64_t jobs) {
    if (jobs <= 0) return;
    register_callbacks();
    SubTransactionId sub = GetCurrentSubTransactionId();
    for (Claims& c : claims)
        if (c.subxact == sub && c.queue == queue) {
            c.jobs += jobs;
            return;
        }
    claims.push_back({queue, sub, jobs});
}

bool add(uint32 queue_hash, const std::vector<int64_t>& ids) {
    if (attach(true) == nullptr) return false;
    Entry* e = own_entry();
    if (e == nullptr) return false;
    uint32 n = pg_atomic_read_u32(&e->count);
    if (n + ids.size() > static_cast<size_t>(kMaxIds)) return false;
    register_callbacks();
    SubTransactionId sub = GetCurrentSubTransactionId();
    SpinLockAcquire(&e->mutex);
    e->db = MyDatabaseId;
    for (int64_t id : ids) e->items[n++] = {queue_hash, sub, id};
    pg_atomic_write_u32(&e->count, n);
    SpinLockRelease(&e->mutex);
    return true;
}

}  // namespace hopper::inflight_claims
