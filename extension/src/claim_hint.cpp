// See include/hopper/claim_hint.hpp.
#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "hopper/boundary.hpp"
#include "hopper/claim_hint.hpp"
#include "hopper/guc.hpp"
#include "hopper/queues.hpp"

extern "C" {
#include "miscadmin.h"
#include "access/xact.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/dsm.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"
}

namespace hopper::claim_hint {

bool before(const Key& a, const Key& b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    if (a.run_at != b.run_at) return a.run_at < b.run_at;
    return a.id < b.id;
}

namespace {

// Queues with longer names get no hint. The server keeps hints for this many queues (of all
// databases) at a time: a queue that finds no slot free takes the one used least recently, if
// that has been idle for kIdleUs, so queues and databases that come and go do not use them up;
// while all are busy, claims on any further queue start at the front.
constexpr size_t kMaxName = 63;
constexpr int kSlots = 256;
constexpr int64_t kIdleUs = 10 * USECS_PER_SEC;
// An idle slot whose wake-up count moved since its reaper last relayed it stays with its queue: the
// reaper reads the counts between the steps of its pass, and one step may take longer than
// kIdleUs (a rescue held by a trigger of the user's, say). Lending it lost the count, and the
// queue's LISTENers were never told. Not for ever: a reaper that exits (stopped, disabled) never
// relays what is left, and the slot must serve another queue in the end.
constexpr int64_t kUnrelayedIdleUs = 5 * 60 * USECS_PER_SEC;
// A claim starts at the front at least this often per queue (see the header).
constexpr int64_t kFrontEveryUs = 1 * USECS_PER_SEC;
constexpr int16_t kNoDelayed = std::numeric_limits<int16_t>::max();
// A commit that made more jobs available than this wakes every waiting pull of their queue.
constexpr int64_t kMaxSignals = 64;

// The last lowerings of a queue, so that a claim can tell which happened while it ran: it may
// raise the hint to what it claimed, but not above any of them. A claim that saw more than this
// many go by leaves the hint as it is.
constexpr uint64_t kRecent = 32;

struct Lowering {
    uint64_t seq;
    Key key;
    TimestampTz at;  // when it was recorded, after its transaction committed
};

// Aligned to a cache line of its own: the count of a wake-up sits on the line its signal's
// spin lock has just taken, and costs no further miss.
struct alignas(64) WaitingPulls {
    ConditionVariable cv;
    // Wake-ups signalled one pull at a time (wake_waiting_pulls), pass-ons not counted.
    pg_atomic_uint64 signals;
};

struct Slot {
    // Odd while the slot passes to another queue (db and name being rewritten, under the alloc
    // lock), even otherwise: a lookup that saw the same even value before and after reading db
    // and name read one queue's. A claim keeps the value it started with and leaves the hint
    // alone if it changed.
    pg_atomic_uint32 gen;
    pg_atomic_uint64 last_used;  // TimestampTz of the last lookup that found it
    bool in_use;                 // set last, once db and name are written; never cleared
    Oid db;
    char name[kMaxName + 1];
    slock_t mutex;  // guards the fields below
    bool valid;
    Key hint;
    uint64_t seq;  // lowerings and clearings so far
    Lowering recent[kRecent];
    TimestampTz front_at;    // when a claim last started at the front
    int16_t delayed_urgent;  // most urgent priority ever pushed to run later
    // Pulls waiting for the queue's jobs (pull_wait.cpp) sleep on it; wake-ups signal it.
    WaitingPulls waiting;
};

constexpr Key kLowest{std::numeric_limits<int16_t>::min(), std::numeric_limits<int64_t>::min(),
                      std::numeric_limits<int64_t>::min()};

// A slot's wake-up count (claim_hint.hpp): the slot's generation in the high half, so that a push
// cannot count for a queue that took the slot after it found it, and the count in the low half.
constexpr int kGenShift = 32;
constexpr uint64 kCountMask = (uint64{1} << kGenShift) - 1;

struct Shared {
    slock_t alloc;  // taking a free slot
    Slot slots[kSlots];
    // Apart from the slots, so that the reaper reads them all in a few cache lines.
    pg_atomic_uint64 wakeups[kSlots];
    // The value of wakeups[i] that the reaper of the slot's database last relayed.
    pg_atomic_uint64 relayed[kSlots];
};

Shared* shared = nullptr;
bool attach_tried = false;

// The hints take a few hundred kilobytes, more than the main shared memory segment can be relied on
// to have spare after start-up when hopper is not preloaded. So they live in a dynamic segment,
// pinned for the life of the server, and only its handle in the main segment.
struct Anchor {
    dsm_handle handle;
};

void attach() {
    attach_tried = true;
    shared = pg_guard([]() -> Shared* {
        bool found = false;
        LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
        auto* anchor = static_cast<Anchor*>(
            ShmemInitStruct("hopper claim hint segment v5", sizeof(Anchor), &found));
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
                for (Slot& slot : s->slots) {
                    SpinLockInit(&slot.mutex);
                    pg_atomic_init_u32(&slot.gen, 0);
                    pg_atomic_init_u64(&slot.last_used, 0);
                    ConditionVariableInit(&slot.waiting.cv);
                    pg_atomic_init_u64(&slot.waiting.signals, 0);
                }
                for (pg_atomic_uint64& w : s->wakeups) pg_atomic_init_u64(&w, 0);
                for (pg_atomic_uint64& r : s->relayed) pg_atomic_init_u64(&r, 0);
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

// Whether this backend has the hints' segment, attaching on first use.
bool attached() {
    if (shared == nullptr && !attach_tried) attach();
    return shared != nullptr;
}

// Whether this backend keeps hints at all for queue (name short enough, a segment to keep them).
bool kept(const std::string& queue) {
    return queue.size() <= kMaxName && attached();
}

bool matches(const Slot& slot, const std::string& queue) {
    return slot.db == MyDatabaseId && std::strncmp(slot.name, queue.c_str(), kMaxName + 1) == 0;
}

size_t hash_of(const std::string& queue) {
    return std::hash<std::string>{}(queue) ^ (static_cast<size_t>(MyDatabaseId) * 0x9e3779b9u);
}

// A slot and the generation it had when it was found for a queue.
struct Found {
    int slot = -1;
    uint32 gen = 0;
};

// The queue's slot, without taking one. Free slots are taken in probe order and never given
// back, so a lookup may stop at the first free one. Raises nothing: it runs at commit too.
Found find(const std::string& queue) noexcept {
    size_t h = hash_of(queue);
    for (int i = 0; i < kSlots; ++i) {
        int at = static_cast<int>((h + static_cast<size_t>(i)) % kSlots);
        Slot& slot = shared->slots[at];
        uint32 gen = pg_atomic_read_u32(&slot.gen);
        pg_read_barrier();
        if (!slot.in_use) return {};
        if (gen % 2 != 0 || !matches(slot, queue)) continue;
        pg_read_barrier();
        if (pg_atomic_read_u32(&slot.gen) == gen) return {at, gen};
    }
    return {};
}

// With the alloc lock held: gives slot `at` to this database's queue, as a fresh hint (claims
// start at the front until one of them sets it). `wakeups` is the slot's wake-up count as the
// caller judged it free to lend: a count made since (a push that found the slot before it idled,
// committing now) keeps the slot where it is, and the caller gets none.
Found lend(int at, const std::string& queue, TimestampTz now, uint64 wakeups) {
    Slot& slot = shared->slots[at];
    SpinLockAcquire(&slot.mutex);
    uint32 gen = pg_atomic_read_u32(&slot.gen);
    // The count passes to the new generation first: from then on a count for the old one fails.
    if (!pg_atomic_compare_exchange_u64(&shared->wakeups[at], &wakeups,
                                        static_cast<uint64>(gen + 2) << kGenShift)) {
        SpinLockRelease(&slot.mutex);
        return {};
    }
    pg_atomic_write_u32(&slot.gen, gen + 1);
    pg_write_barrier();
    slot.db = MyDatabaseId;
    std::memcpy(slot.name, queue.c_str(), queue.size() + 1);
    slot.valid = false;
    slot.seq = 0;
    std::memset(slot.recent, 0, sizeof slot.recent);
    slot.front_at = 0;
    slot.delayed_urgent = kNoDelayed;
    pg_write_barrier();
    slot.in_use = true;
    pg_atomic_write_u32(&slot.gen, gen + 2);
    pg_atomic_write_u64(&slot.last_used, static_cast<uint64>(now));
    SpinLockRelease(&slot.mutex);
    return {at, gen + 2};
}

// Whether slot `at`, in use, may pass to another queue now: idle long enough, and its wake-up
// count relayed (or left unrelayed for kUnrelayedIdleUs). *wakeups: the count it was judged by.
bool lendable(int at, TimestampTz now, uint64* wakeups) noexcept {
    TimestampTz idle =
        now - static_cast<TimestampTz>(pg_atomic_read_u64(&shared->slots[at].last_used));
    if (idle < kIdleUs) return false;
    *wakeups = pg_atomic_read_u64(&shared->wakeups[at]);
    bool unrelayed =
        (*wakeups & kCountMask) != 0 && *wakeups != pg_atomic_read_u64(&shared->relayed[at]);
    return !unrelayed || idle >= kUnrelayedIdleUs;
}

// Whether a slot could be lent now: one is free, or lendable. Read without the alloc lock;
// slot_of() decides again under it.
bool could_lend(TimestampTz now) noexcept {
    uint64 wakeups = 0;
    for (int i = 0; i < kSlots; ++i)
        if (!shared->slots[i].in_use || lendable(i, now, &wakeups)) return true;
    return false;
}

// Who asks for a queue's slot. A writer has just made jobs of its queue available, so the queue
// is in use; a reader (a claim, a waiting pull) names it, and the name may be no queue at all.
enum class Asker { kWriter, kReader };

// The queue's slot, taken on first use: the first free one in probe order, or else the one used
// least recently among those that may be lent (lendable()). None (-1) when the name is too long,
// no segment could be had, or every slot is busy; and, for a reader, when the name is no queue of
// hopper.queues: a worker that pulls from many names that are not queues (a typo, a loop over
// names) must not push the queues in use out of their slots. That look-up is made only when a
// slot could be lent, so a queue that holds its slot, or waits for one while all are busy, pays
// nothing for it.
Found slot_of(const std::string& queue, Asker asker) {
    if (!kept(queue)) return {};
    TimestampTz now = GetCurrentTimestamp();
    Found f = find(queue);
    if (f.slot < 0) {
        if (!could_lend(now)) return {};
        if (asker == Asker::kReader && !queues::exists(queue)) return {};
        size_t h = hash_of(queue);
        SpinLockAcquire(&shared->alloc);
        // Under the lock nobody else takes a slot: look again, then take one.
        f = find(queue);
        for (int i = 0; f.slot < 0 && i < kSlots; ++i) {
            int at = static_cast<int>((h + static_cast<size_t>(i)) % kSlots);
            if (!shared->slots[at].in_use) f = lend(at, queue, now, 0);
        }
        if (f.slot < 0) {
            int oldest = -1;
            uint64 oldest_wakeups = 0;
            for (int i = 0; i < kSlots; ++i) {
                uint64 wakeups = 0;
                if (!lendable(i, now, &wakeups)) continue;
                if (oldest < 0 || pg_atomic_read_u64(&shared->slots[i].last_used) <
                                      pg_atomic_read_u64(&shared->slots[oldest].last_used)) {
                    oldest = i;
                    oldest_wakeups = wakeups;
                }
            }
            if (oldest >= 0) f = lend(oldest, queue, now, oldest_wakeups);
        }
        SpinLockRelease(&shared->alloc);
        return f;
    }
    // Written at most once a second: lookups on a busy queue should not all dirty the cache line
    // that every lookup reads.
    pg_atomic_uint64& last_used = shared->slots[f.slot].last_used;
    if (now - static_cast<TimestampTz>(pg_atomic_read_u64(&last_used)) >= USECS_PER_SEC)
        pg_atomic_write_u64(&last_used, static_cast<uint64>(now));
    return f;
}

// With the slot's mutex held.
void record(Slot& slot, const Key& key, TimestampTz now) {
    ++slot.seq;
    slot.recent[slot.seq % kRecent] = {slot.seq, key, now};
}

void lower(Slot& slot, uint32 gen, const Key& key, bool delayed) {
    TimestampTz now = GetCurrentTimestamp();
    SpinLockAcquire(&slot.mutex);
    // Passed to another queue since it was found: that queue's hint is not this job's business.
    if (pg_atomic_read_u32(&slot.gen) != gen) {
        SpinLockRelease(&slot.mutex);
        return;
    }
    if (slot.valid && before(key, slot.hint)) slot.hint = key;
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

// This transaction's effects on hints, applied when it ends; reset at every end. They name the
// queue, not its slot: the slot may pass to another queue before then, and the queue take a new
// one that a claim sets meanwhile.
struct Pending {
    std::string queue;
    Key key;
    bool delayed;
};
// Remembered one by one, so that a registration that failed (out of memory) is retried alone.
bool xact_registered = false;
bool subxact_registered = false;
std::vector<Pending> lowerings;
std::vector<std::string> clear_when_done;  // at commit or rollback
std::vector<std::string> clear_on_rollback;
bool clear_database_on_rollback_ = false;
int quiet_rollbacks = 0;  // QuietRollbacks alive

void clear_all(const std::vector<std::string>& queues) noexcept {
    for (const std::string& queue : queues) {
        Found f = find(queue);
        if (f.slot >= 0) clear(shared->slots[f.slot]);
    }
}

void rolled_back() noexcept {
    clear_all(clear_on_rollback);
    if (clear_database_on_rollback_)
        for (Slot& slot : shared->slots)
            if (slot.in_use && slot.db == MyDatabaseId) clear(slot);
    // The jobs a rolled-back claim locked are available again now: wake the pulls waiting on its
    // queues, or they would find them only at their next look. A claim that locked no row
    // assigned no transaction id, so a pull that ends empty (a waiting pull cancelled, say) wakes
    // nobody. How many jobs is not known here: every waiting pull, on this rare path.
    if (quiet_rollbacks == 0 && TransactionIdIsValid(GetCurrentTransactionIdIfAny()))
        for (const std::string& queue : clear_on_rollback) wake_waiting_pulls(queue, 0);
}

void forget() noexcept {
    lowerings.clear();
    clear_when_done.clear();
    clear_on_rollback.clear();
    clear_database_on_rollback_ = false;
}

void committed() noexcept {
    for (const Pending& p : lowerings) {
        Found f = find(p.queue);
        if (f.slot >= 0) lower(shared->slots[f.slot], f.gen, p.key, p.delayed);
    }
    clear_all(clear_when_done);
    forget();
}

// Runs after the commit is visible (or the rollback done), so a claim that missed the jobs while
// they were in flight finds the hint lowered afterwards. Nothing here may raise.
void on_transaction_event(XactEvent event, void*) {
    switch (event) {
        case XACT_EVENT_COMMIT:
            committed();
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
    if (subxact_registered) return;
    pg_guard([] {
        if (!xact_registered) {
            RegisterXactCallback(on_transaction_event, nullptr);
            xact_registered = true;
        }
        RegisterSubXactCallback(on_subtransaction_event, nullptr);
        subxact_registered = true;
    });
}

void remember(std::vector<std::string>& list, const std::string& queue) {
    register_callbacks();
    for (const std::string& q : list)
        if (q == queue) return;
    list.push_back(queue);
}

}  // namespace

Start begin(const std::string& queue) {
    Start st;
    Found f = slot_of(queue, Asker::kReader);
    if (f.slot < 0) return st;
    // Rows this claim locks are passed over by others' claims: if they come back, so must the hint.
    remember(clear_on_rollback, queue);
    st.slot = f.slot;
    st.gen = f.gen;  // claimed() checks it: the slot may pass to another queue meanwhile
    if (!guc::claim_resume) return st;
    Slot& slot = shared->slots[f.slot];
    TimestampTz now = GetCurrentTimestamp();
    SpinLockAcquire(&slot.mutex);
    if (pg_atomic_read_u32(&slot.gen) != f.gen) {
        // Passed to another queue just now: this claim starts at the front.
        SpinLockRelease(&slot.mutex);
        return st;
    }
    if (slot.valid && now - slot.front_at < kFrontEveryUs) {
        st.resume = true;
        st.key = slot.hint;
    } else if (slot.valid) {
        slot.front_at = now;  // this claim is the second's start from the front
    }
    st.seq = slot.seq;
    SpinLockRelease(&slot.mutex);
    if (st.resume) {
        // What this transaction itself made available lowers the hint only when it commits, but
        // its own claims see those jobs now: they start below them too. If it may have put jobs
        // back anywhere (a rescue), they start at the front.
        for (const std::string& q : clear_when_done)
            if (q == queue) st.resume = false;
        for (const Pending& p : lowerings)
            if (p.queue == queue && before(p.key, st.key)) st.key = p.key;
    }
    return st;
}

void claimed(const Start& st, const Key& last, TimestampTz due_at) {
    if (st.slot < 0) return;
    Slot& slot = shared->slots[st.slot];
    TimestampTz now = GetCurrentTimestamp();
    SpinLockAcquire(&slot.mutex);
    // A slot passed to another queue since (and maybe back) no longer holds what the claim read.
    if (pg_atomic_read_u32(&slot.gen) == st.gen && slot.seq - st.seq < kRecent) {
        Key to = last;
        // The claim took jobs with run_at <= due_at. Jobs that appeared while it ran, and jobs
        // pushed after due_at (not due for it, due for the next claim), may lie below them.
        bool covered = slot.seq < kRecent;
        for (const Lowering& l : slot.recent) {
            if (l.seq == 0) continue;
            if ((l.seq > st.seq || l.key.run_at > due_at) && before(l.key, to)) to = l.key;
            if (l.seq == slot.seq - kRecent + 1 && l.at <= due_at) covered = true;
        }
        // When the lowerings kept do not reach back to due_at, such a push may have been
        // forgotten: move only within the priority the claim started at, where every job pushed
        // after due_at comes after what was claimed.
        bool within_priority = st.resume && to.priority == st.key.priority;
        // A job scheduled for later at a more urgent priority becomes due with no write: stay
        // at its priority. So may one at the priority of a job not yet due that `to` came from,
        // scheduled before it (its lowering forgotten among the last kRecent): stay at the start
        // of that priority.
        if (slot.delayed_urgent < to.priority ||
            (slot.delayed_urgent == to.priority && to.run_at > due_at))
            to = Key{slot.delayed_urgent, kLowest.run_at, kLowest.id};
        if (covered || within_priority) {
            if (!slot.valid) slot.front_at = now;
            // A claim from the front may also move the hint down: it found a job below it.
            if (!slot.valid || !st.resume || before(slot.hint, to)) slot.hint = to;
            slot.valid = true;
        }
    }
    SpinLockRelease(&slot.mutex);
}

// Writers keep hints right whatever their own hopper.claim_resume says: other sessions may use
// them.
void made_available(const std::string& queue, const Key& key, bool delayed) {
    // Takes a slot if the queue has none: it must learn of a job scheduled at an urgent priority
    // before any claim sets a hint.
    if (slot_of(queue, Asker::kWriter).slot < 0) return;
    register_callbacks();
    lowerings.push_back({queue, key, delayed});
}

void clear_at_end(const std::string& queue) {
    if (!kept(queue)) return;
    remember(clear_when_done, queue);
}

void clear_database_on_rollback() {
    if (!attached()) return;
    register_callbacks();
    clear_database_on_rollback_ = true;
}

std::vector<Position> positions() {
    std::vector<Position> out;
    if (!attached()) return out;
    for (Slot& slot : shared->slots) {
        if (!slot.in_use) continue;
        char name[kMaxName + 1];
        bool mine = false;
        Position p{};
        // Passing a slot to another queue takes its mutex: under it, db and name are whole.
        SpinLockAcquire(&slot.mutex);
        if (slot.db == MyDatabaseId) {
            mine = true;
            std::memcpy(name, slot.name, sizeof name);
            p.valid = slot.valid;
            p.key = slot.hint;
            p.last_used = static_cast<TimestampTz>(pg_atomic_read_u64(&slot.last_used));
        }
        SpinLockRelease(&slot.mutex);
        if (!mine) continue;
        p.queue = name;
        out.push_back(std::move(p));
    }
    return out;
}

bool can_count_wakeup(const std::string& queue) {
    return slot_of(queue, Asker::kWriter).slot >= 0;
}

bool count_wakeup(const std::string& queue) noexcept {
    if (shared == nullptr) return false;
    Found f = find(queue);
    if (f.slot < 0) return false;
    pg_atomic_uint64& w = shared->wakeups[f.slot];
    uint64 v = pg_atomic_read_u64(&w);
    for (;;) {
        if ((v >> kGenShift) != f.gen) return false;
        uint64 next = (v & ~kCountMask) | ((v + 1) & kCountMask);
        if (pg_atomic_compare_exchange_u64(&w, &v, next)) return true;
    }
}

namespace {
// Whether slot i belongs to this database's queue with the count v (its generation v's).
bool counts_here(int i, uint64 v) {
    Slot& slot = shared->slots[i];
    SpinLockAcquire(&slot.mutex);
    bool here =
        slot.in_use && slot.db == MyDatabaseId && pg_atomic_read_u32(&slot.gen) == (v >> kGenShift);
    SpinLockRelease(&slot.mutex);
    return here;
}
}  // namespace

void read_wakeups(WakeupCounts& counts) {
    counts.seen.assign(kSlots, 0);
    counts.told.clear();
    if (!attached()) return;
    for (int i = 0; i < kSlots; ++i) {
        uint64 v = pg_atomic_read_u64(&shared->wakeups[i]);
        counts.seen[i] = v;
        // Not relayed one by one: the first pass wakes every queue with due jobs instead.
        if ((v & kCountMask) != 0 && counts_here(i, v)) counts.told.push_back({i, v});
    }
}

void relayed(const WakeupCounts& counts) {
    if (!attached()) return;
    for (const auto& [slot, v] : counts.told) pg_atomic_write_u64(&shared->relayed[slot], v);
}

std::vector<std::string> woken_queues(WakeupCounts& counts) {
    std::vector<std::string> out;
    counts.told.clear();
    if (!attached()) return out;
    counts.seen.resize(kSlots, 0);
    for (int i = 0; i < kSlots; ++i) {
        uint64 v = pg_atomic_read_u64(&shared->wakeups[i]);
        if (v == counts.seen[i]) continue;
        counts.seen[i] = v;
        Slot& slot = shared->slots[i];
        char name[kMaxName + 1];
        bool mine = false;
        // Under the mutex db and name are whole; the generation says whether the count is theirs
        // (a count made before the slot passed to another queue is lost with the slot, see
        // push_wakeup.cpp).
        SpinLockAcquire(&slot.mutex);
        if (slot.in_use && slot.db == MyDatabaseId &&
            pg_atomic_read_u32(&slot.gen) == (v >> kGenShift) && (v & kCountMask) != 0) {
            mine = true;
            std::memcpy(name, slot.name, sizeof name);
        }
        SpinLockRelease(&slot.mutex);
        if (!mine) continue;
        out.emplace_back(name);
        counts.told.push_back({i, v});
    }
    return out;
}

bool can_wake(const std::string& queue) {
    return kept(queue);
}

Waiting waiting_pulls(const std::string& queue) {
    Found f = slot_of(queue, Asker::kReader);
    if (f.slot < 0) return {};
    WaitingPulls& w = shared->slots[f.slot].waiting;
    return {&w.cv, &w.signals};
}

QuietRollbacks::QuietRollbacks() {
    ++quiet_rollbacks;
}
QuietRollbacks::~QuietRollbacks() {
    --quiet_rollbacks;
}

void wake_waiting_pulls(const std::string& queue, int64_t jobs) noexcept {
    if (shared == nullptr) return;
    Found f = find(queue);
    if (f.slot < 0) return;
    WaitingPulls& w = shared->slots[f.slot].waiting;
    if (jobs <= 0 || jobs > kMaxSignals) {
        ConditionVariableBroadcast(&w.cv);
        return;
    }
    // Counted before the signals, so that the pulls they wake see the count moved.
    pg_atomic_fetch_add_u64(&w.signals, static_cast<uint64>(jobs));
    for (int64_t i = 0; i < jobs; ++i) ConditionVariableSignal(&w.cv);
}

void apply_at_commit() noexcept {
    if (shared != nullptr) committed();
}

void apply_at_rollback() noexcept {
    if (shared != nullptr) rolled_back();
}

}  // namespace hopper::claim_hint
