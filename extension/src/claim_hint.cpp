// See include/hopper/claim_hint.hpp.
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "hopper/boundary.hpp"
#include "hopper/claim_hint.hpp"
#include "hopper/guc.hpp"

extern "C" {
#include "miscadmin.h"
#include "access/xact.h"
#include "port/atomics.h"
#include "storage/dsm.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"
}

namespace hopper::claim_hint {
namespace {

// Queues with longer names get no hint; slots are never given back, so the server keeps hints
// for this many queues (of all databases) and claims on any further queue start at the front.
constexpr size_t kMaxName = 63;
constexpr int kSlots = 256;
// A claim starts at the front at least this often per queue (see the header).
constexpr int64_t kFrontEveryUs = 1 * USECS_PER_SEC;
constexpr int16_t kNoDelayed = std::numeric_limits<int16_t>::max();

// The last lowerings of a queue, so that a claim can tell which happened while it ran: it may
// raise the hint to what it claimed, but not above any of them. A claim that saw more than this
// many go by leaves the hint as it is.
constexpr uint64_t kRecent = 32;

struct Lowering {
    uint64_t seq;
    Key key;
    TimestampTz at;  // when it was recorded, after its transaction committed
};

struct Slot {
    bool in_use;  // set last, once db and name are written; never cleared
    Oid db;
    char name[kMaxName + 1];
    slock_t mutex;  // guards the fields below
    bool valid;
    Key hint;
    uint64_t seq;  // lowerings and clearings so far
    Lowering recent[kRecent];
    TimestampTz front_at;    // when a claim last started at the front
    int16_t delayed_urgent;  // most urgent priority ever pushed to run later
};

constexpr Key kLowest{std::numeric_limits<int16_t>::min(), std::numeric_limits<int64_t>::min(),
                      std::numeric_limits<int64_t>::min()};

struct Shared {
    slock_t alloc;  // taking a free slot
    Slot slots[kSlots];
};

Shared* shared = nullptr;
bool attach_tried = false;

// The hints take a few hundred kilobytes, more than the main shared memory segment can be relied on
// to have spare after start-up when hopper is not preloaded. So they live in a dynamic segment,
// pinned for the life of the server, and only its handle in the main segment.
struct Anchor {
    dsm_handle handle;
};

bool less(const Key& a, const Key& b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.run_at != b.run_at) return a.run_at < b.run_at;
    return a.id < b.id;
}

void attach() {
    attach_tried = true;
    shared = pg_guard([]() -> Shared* {
        bool found = false;
        LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
        auto* anchor = static_cast<Anchor*>(
            ShmemInitStruct("hopper claim hint segment", sizeof(Anchor), &found));
        if (!found) anchor->handle = DSM_HANDLE_INVALID;
        dsm_segment* seg = nullptr;
        if (anchor->handle != DSM_HANDLE_INVALID) {
            seg = dsm_attach(anchor->handle);
        } else {
            seg = dsm_create(sizeof(Shared), DSM_CREATE_NULL_IF_MAXSEGMENTS);
            if (seg != nullptr) {
                auto* s = static_cast<Shared*>(dsm_segment_address(seg));
                std::memset(s, 0, sizeof(Shared));
                SpinLockInit(&s->alloc);
                for (Slot& slot : s->slots) SpinLockInit(&slot.mutex);
                dsm_pin_segment(seg);
                anchor->handle = dsm_segment_handle(seg);
            }
        }
        LWLockRelease(AddinShmemInitLock);
        if (seg == nullptr) {
            ereport(LOG, (errmsg("hopper: no dynamic shared memory segment left for claim hints; "
                                 "claims in this session start at the front of the queue")));
            return nullptr;
        }
        dsm_pin_mapping(seg);
        return static_cast<Shared*>(dsm_segment_address(seg));
    });
}

bool matches(const Slot& slot, const std::string& queue) {
    return slot.db == MyDatabaseId && std::strncmp(slot.name, queue.c_str(), kMaxName + 1) == 0;
}

// The queue's slot, taken on first use; -1 when none is left or the name is too long.
int slot_of(const std::string& queue) {
    if (queue.size() > kMaxName) return -1;
    if (shared == nullptr && !attach_tried) attach();
    if (shared == nullptr) return -1;
    size_t h = std::hash<std::string>{}(queue) ^ (static_cast<size_t>(MyDatabaseId) * 0x9e3779b9u);
    for (int i = 0; i < kSlots; ++i) {
        int at = static_cast<int>((h + static_cast<size_t>(i)) % kSlots);
        Slot& slot = shared->slots[at];
        if (!slot.in_use) {
            SpinLockAcquire(&shared->alloc);
            if (!slot.in_use) {
                slot.db = MyDatabaseId;
                std::memcpy(slot.name, queue.c_str(), queue.size() + 1);
                slot.valid = false;
                slot.seq = 0;
                slot.front_at = 0;
                slot.delayed_urgent = kNoDelayed;
                pg_write_barrier();
                slot.in_use = true;
            }
            SpinLockRelease(&shared->alloc);
        }
        pg_read_barrier();
        if (matches(slot, queue)) return at;
    }
    return -1;
}

// With the slot's mutex held.
void record(Slot& slot, const Key& key, TimestampTz now) {
    ++slot.seq;
    slot.recent[slot.seq % kRecent] = {slot.seq, key, now};
}

void lower(Slot& slot, const Key& key, bool delayed) {
    TimestampTz now = GetCurrentTimestamp();
    SpinLockAcquire(&slot.mutex);
    if (slot.valid && less(key, slot.hint)) slot.hint = key;
    if (delayed && key.priority < slot.delayed_urgent) slot.delayed_urgent = key.priority;
    record(slot, key, now);
    SpinLockRelease(&slot.mutex);
}

// A claim that started before this and raises after it lands on the lowest key: the front.
void clear(Slot& slot) {
    TimestampTz now = GetCurrentTimestamp();
    SpinLockAcquire(&slot.mutex);
    slot.valid = false;
    record(slot, kLowest, now);
    SpinLockRelease(&slot.mutex);
}

// This transaction's effects on hints, applied when it ends; reset at every end.
struct Pending {
    int slot;
    Key key;
    bool delayed;
};
bool callbacks_registered = false;
std::vector<Pending> lowerings;
std::vector<int> clear_when_done;  // at commit or rollback
std::vector<int> clear_on_rollback;
bool clear_database_on_rollback_ = false;

void clear_all(const std::vector<int>& slots) noexcept {
    for (int s : slots) clear(shared->slots[s]);
}

void rolled_back() noexcept {
    clear_all(clear_on_rollback);
    if (clear_database_on_rollback_)
        for (Slot& slot : shared->slots)
            if (slot.in_use && slot.db == MyDatabaseId) clear(slot);
}

void forget() noexcept {
    lowerings.clear();
    clear_when_done.clear();
    clear_on_rollback.clear();
    clear_database_on_rollback_ = false;
}

// Runs after the commit is visible (or the rollback done), so a claim that missed the jobs while
// they were in flight finds the hint lowered afterwards. Nothing here may raise.
void on_transaction_event(XactEvent event, void*) {
    switch (event) {
        case XACT_EVENT_COMMIT:
            for (const Pending& p : lowerings) lower(shared->slots[p.slot], p.key, p.delayed);
            clear_all(clear_when_done);
            forget();
            return;
        case XACT_EVENT_ABORT:
            clear_all(clear_when_done);
            rolled_back();
            forget();
            return;
        case XACT_EVENT_PREPARE:
            // Committed or rolled back later, maybe elsewhere: the once-a-second front start
            // finds what it puts back.
            forget();
            return;
        default:
            return;
    }
}

// Rows locked in an aborted subtransaction are available again at once.
void on_subtransaction_event(SubXactEvent event, SubTransactionId, SubTransactionId, void*) {
    if (event == SUBXACT_EVENT_ABORT_SUB) rolled_back();
}

void register_callbacks() {
    if (callbacks_registered) return;
    pg_guard([] {
        RegisterXactCallback(on_transaction_event, nullptr);
        RegisterSubXactCallback(on_subtransaction_event, nullptr);
    });
    callbacks_registered = true;
}

void remember(std::vector<int>& list, int slot) {
    register_callbacks();
    for (int s : list)
        if (s == slot) return;
    list.push_back(slot);
}

}  // namespace

Start begin(const std::string& queue) {
    Start st;
    st.slot = slot_of(queue);
    if (st.slot < 0) return st;
    // Rows this claim locks are passed over by others' claims: if they come back, so must the hint.
    remember(clear_on_rollback, st.slot);
    if (!guc::claim_resume) return st;
    Slot& slot = shared->slots[st.slot];
    TimestampTz now = GetCurrentTimestamp();
    SpinLockAcquire(&slot.mutex);
    if (slot.valid && now - slot.front_at < kFrontEveryUs) {
        st.resume = true;
        st.key = slot.hint;
    } else if (slot.valid) {
        slot.front_at = now;  // this claim is the second's start from the front
    }
    st.seq = slot.seq;
    SpinLockRelease(&slot.mutex);
    return st;
}

void claimed(const Start& st, const Key& last, TimestampTz due_at) {
    if (st.slot < 0) return;
    Slot& slot = shared->slots[st.slot];
    TimestampTz now = GetCurrentTimestamp();
    SpinLockAcquire(&slot.mutex);
    if (slot.seq - st.seq < kRecent) {
        Key to = last;
        // The claim took jobs with run_at <= due_at. Jobs that appeared while it ran, and jobs
        // pushed after due_at (not due for it, due for the next claim), may lie below them.
        bool covered = slot.seq < kRecent;
        for (const Lowering& l : slot.recent) {
            if (l.seq == 0) continue;
            if ((l.seq > st.seq || l.key.run_at > due_at) && less(l.key, to)) to = l.key;
            if (l.seq == slot.seq - kRecent + 1 && l.at <= due_at) covered = true;
        }
        // When the lowerings kept do not reach back to due_at, such a push may have been
        // forgotten: move only within the priority the claim started at, where every job pushed
        // after due_at comes after what was claimed.
        bool within_priority = st.resume && to.priority == st.key.priority;
        // A job scheduled for later at a more urgent priority becomes due with no write: stay
        // at its priority.
        if (slot.delayed_urgent < to.priority)
            to = Key{slot.delayed_urgent, kLowest.run_at, kLowest.id};
        if (covered || within_priority) {
            if (!slot.valid) slot.front_at = now;
            // A claim from the front may also move the hint down: it found a job below it.
            if (!slot.valid || !st.resume || less(slot.hint, to)) slot.hint = to;
            slot.valid = true;
        }
    }
    SpinLockRelease(&slot.mutex);
}

// Writers keep hints right whatever their own hopper.claim_resume says: other sessions may use
// them.
void made_available(const std::string& queue, const Key& key, bool delayed) {
    int s = slot_of(queue);
    if (s < 0) return;
    register_callbacks();
    lowerings.push_back({s, key, delayed});
}

void clear_at_end(const std::string& queue) {
    int s = slot_of(queue);
    if (s < 0) return;
    remember(clear_when_done, s);
}

void clear_database_on_rollback() {
    if (shared == nullptr && !attach_tried) attach();
    if (shared == nullptr) return;
    register_callbacks();
    clear_database_on_rollback_ = true;
}

}  // namespace hopper::claim_hint
