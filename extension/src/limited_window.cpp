// See include/hopper/limited_window.hpp.
#include <cstring>

#include "hopper/direct_access.hpp"
#include "hopper/leaf_walk.hpp"
#include "hopper/limited_window.hpp"
#include "hopper/table_columns.hpp"
#include "hopper/table_layout.hpp"

extern "C" {
#include "access/genam.h"
#include "access/nbtree.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "nodes/primnodes.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
}

namespace hopper::limited_window {
namespace {

using namespace jobs_table;

// What layout() remembers: the relations' OIDs and hopper.queue_key_limits' columns.
enum Value { kLeaseIdx, kKeyLimits, kKeyLimitsPkey, kKeyLimitsMax, kValues };
const int kLayoutKey = 0;

// Whether `idx` is a valid B-tree of `rel` on exactly `cols`.
bool btree_on(Relation idx, Relation rel, const int* cols, int n) {
    Form_pg_index ix = idx->rd_index;
    if (idx->rd_rel->relam != BTREE_AM_OID || ix->indrelid != RelationGetRelid(rel) ||
        !ix->indisvalid || !ix->indisready || ix->indnkeyatts != n)
        return false;
    for (int i = 0; i < n; ++i)
        if (ix->indkey.values[i] != cols[i]) return false;
    return true;
}

// jobs_lease_idx holds every job with a lease: its predicate is "lease_until IS NOT NULL".
bool lease_index_as_expected(Relation idx, Relation jobs, const int* col) {
    const int keys[2] = {col[kQueue], col[kLeaseUntil]};
    if (!btree_on(idx, jobs, keys, 2)) return false;
    List* pred = RelationGetIndexPredicate(idx);
    if (list_length(pred) != 1 || !IsA(linitial(pred), NullTest)) return false;
    auto* test = static_cast<NullTest*>(linitial(pred));
    return test->nulltesttype == IS_NOT_NULL && IsA(test->arg, Var) &&
           reinterpret_cast<Var*>(test->arg)->varattno == col[kLeaseUntil];
}

bool byte_equal(Oid collation) {
    return OidIsValid(collation) && get_collation_isdeterministic(collation);
}

// Finds and checks the relations; remembered per backend (include/hopper/table_layout.hpp).
bool layout(Relation jobs, const int* col, int* v) {
    if (table_layout::recall(&kLayoutKey, RelationGetRelid(jobs), v, kValues)) return true;
    uint64 since = table_layout::generation();
    Oid ns = get_namespace_oid("hopper", true);
    Oid lease = get_relname_relid("jobs_lease_idx", ns);
    Oid limits = get_relname_relid("queue_key_limits", ns);
    if (!OidIsValid(ns) || !OidIsValid(lease) || !OidIsValid(limits)) return false;
    TupleDesc jd = RelationGetDescr(jobs);
    if (!byte_equal(TupleDescAttr(jd, col[kQueue] - 1)->attcollation) ||
        !byte_equal(TupleDescAttr(jd, col[kConcurrencyKey] - 1)->attcollation))
        return false;
    Relation idx = index_open(lease, AccessShareLock);
    bool ok = lease_index_as_expected(idx, jobs, col);
    index_close(idx, AccessShareLock);
    if (!ok) return false;

    Relation kl = table_open(limits, AccessShareLock);
    static const char* const kNames[] = {"queue", "concurrency_key", "max_running"};
    static const Oid kTypes[] = {TEXTOID, TEXTOID, INT4OID};
    int kcol[3];
    ok = table_layout::attnums(kl, kNames, kTypes, 3, kcol);
    Oid pkey = RelationGetPrimaryKeyIndex(kl);
    ok = ok && OidIsValid(pkey);
    if (ok) {
        Relation pk = index_open(pkey, AccessShareLock);
        ok = btree_on(pk, kl, kcol, 2) && byte_equal(pk->rd_indcollation[0]) &&
             byte_equal(pk->rd_indcollation[1]);
        index_close(pk, AccessShareLock);
    }
    table_close(kl, AccessShareLock);
    if (!ok) return false;
    v[kLeaseIdx] = static_cast<int>(lease);
    v[kKeyLimits] = static_cast<int>(limits);
    v[kKeyLimitsPkey] = static_cast<int>(pkey);
    v[kKeyLimitsMax] = kcol[2];
    const Oid rels[] = {RelationGetRelid(jobs), lease, limits, pkey};
    table_layout::remember(&kLayoutKey, rels, 4, v, kValues, since);
    return true;
}

// A concurrency key, copied out of its row.
struct Key {
    const char* data;
    int len;
};

int compare_keys(const Key& a, const Key& b) {
    if (a.len != b.len) return a.len < b.len ? -1 : 1;
    return std::memcmp(a.data, b.data, a.len);
}

int compare_key_ptrs(const void* a, const void* b) {
    return compare_keys(*static_cast<const Key*>(a), *static_cast<const Key*>(b));
}

int compare_ids(const void* a, const void* b) {
    int64 x = *static_cast<const int64*>(a);
    int64 y = *static_cast<const int64*>(b);
    return x < y ? -1 : (x > y ? 1 : 0);
}

// The text of column `attnum` of the slot's row ({nullptr, -1} if NULL), copied if `copy`.
Key text_of(TupleTableSlot* slot, int attnum, bool copy) {
    bool isnull;
    Datum d = slot_getattr(slot, attnum, &isnull);
    if (isnull) return {nullptr, -1};
    text* t = DatumGetTextPP(d);
    Key k{VARDATA_ANY(t), static_cast<int>(VARSIZE_ANY_EXHDR(t))};
    if (copy) {
        char* c = static_cast<char*>(palloc(k.len > 0 ? k.len : 1));
        std::memcpy(c, k.data, k.len);
        k.data = c;
    }
    return k;
}

// A growing array of keys.
struct Keys {
    Key* items;
    int n;
    int cap;
};

void push_key(Keys* ks, Key k) {
    if (ks->n == ks->cap) {
        ks->cap = ks->cap == 0 ? 16 : ks->cap * 2;
        ks->items =
            static_cast<Key*>(ks->items == nullptr ? palloc(sizeof(Key) * ks->cap)
                                                   : repalloc(ks->items, sizeof(Key) * ks->cap));
    }
    ks->items[ks->n++] = k;
}

// How many of the sorted keys equal k.
int64 count_equal(const Keys& sorted, const Key& k) {
    int lo = 0, hi = sorted.n;
    while (lo < hi) {  // the first not below k
        int mid = (lo + hi) / 2;
        if (compare_keys(sorted.items[mid], k) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    int64 n = 0;
    while (lo + n < sorted.n && compare_keys(sorted.items[lo + n], k) == 0) ++n;
    return n;
}

// The queue's running jobs: their number, and the keys of those with one. Those in flight count
// when this snapshot still shows them available, as the statement's `running` does.
int64 count_running(const Source& s, Relation jobs, const int* col, const Pull& p, Snapshot snap,
                    Keys* keys) {
    TupleTableSlot* slot = table_slot_create(jobs, nullptr);
    int64 total = 0;
    bool isnull;
    ScanKeyData qk;
    ScanKeyEntryInitialize(&qk, 0, 1, BTEqualStrategyNumber, InvalidOid,
                           s.lease_idx->rd_indcollation[0], F_TEXTEQ, p.queue);
    IndexScanDesc scan = index_beginscan(jobs, s.lease_idx, snap, 1, 0);
    index_rescan(scan, &qk, 1, nullptr, 0);
    while (index_getnext_slot(scan, ForwardScanDirection, slot)) {
        Datum state = slot_getattr(slot, col[kState], &isnull);
        if (isnull || DatumGetObjectId(state) != p.running) continue;
        slot_getattr(slot, col[kLeaseUntil], &isnull);
        if (isnull) continue;
        ++total;
        Key k = text_of(slot, col[kConcurrencyKey], true);
        if (k.data != nullptr) push_key(keys, k);
    }
    index_endscan(scan);

    if (p.n_inflight > 0) {
        text* queue = DatumGetTextPP(p.queue);
        Key want{VARDATA_ANY(queue), static_cast<int>(VARSIZE_ANY_EXHDR(queue))};
        ScanKeyData ik;
        IndexScanDesc byid = index_beginscan(jobs, s.jobs_pkey, snap, 1, 0);
        for (int i = 0; i < p.n_inflight; ++i) {
            ScanKeyEntryInitialize(&ik, 0, 1, BTEqualStrategyNumber, InvalidOid, InvalidOid,
                                   F_INT8EQ, Int64GetDatum(p.inflight[i]));
            index_rescan(byid, &ik, 1, nullptr, 0);
            if (!index_getnext_slot(byid, ForwardScanDirection, slot)) continue;
            Datum state = slot_getattr(slot, col[kState], &isnull);
            if (isnull || DatumGetObjectId(state) != p.available) continue;
            Key q = text_of(slot, col[kQueue], false);
            if (q.data == nullptr || compare_keys(q, want) != 0) continue;
            ++total;
            Key k = text_of(slot, col[kConcurrencyKey], true);
            if (k.data != nullptr) push_key(keys, k);
        }
        index_endscan(byid);
    }
    ExecDropSingleTupleTableSlot(slot);
    return total;
}

// A key's limit: its override in hopper.queue_key_limits, else the queue's default (-1: none).
int32 key_limit(const Source& s, IndexScanDesc scan, TupleTableSlot* slot, const Pull& p,
                const Key& k) {
    ScanKeyData keys[2];
    ScanKeyEntryInitialize(&keys[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
                           s.key_limits_pkey->rd_indcollation[0], F_TEXTEQ, p.queue);
    ScanKeyEntryInitialize(&keys[1], 0, 2, BTEqualStrategyNumber, InvalidOid,
                           s.key_limits_pkey->rd_indcollation[1], F_TEXTEQ,
                           PointerGetDatum(cstring_to_text_with_len(k.data, k.len)));
    index_rescan(scan, keys, 2, nullptr, 0);
    if (!index_getnext_slot(scan, ForwardScanDirection, slot)) return p.key_max_running;
    bool isnull;
    Datum d = slot_getattr(slot, s.key_limits_max, &isnull);
    return isnull ? p.key_max_running : DatumGetInt32(d);
}

// One of the window's jobs.
struct Candidate {
    ItemPointerData tid;
    Key key;  // data nullptr: no key
    claim_hint::Key pos;
};

// A distinct key of the window, with how many of its jobs this pull may take and has taken.
struct WindowKey {
    Key key;
    int64 free;
    int64 taken;
};

int compare_window_keys(const void* a, const void* b) {
    return compare_keys(static_cast<const WindowKey*>(a)->key,
                        static_cast<const WindowKey*>(b)->key);
}

bool choose_in(const Source& s, Relation jobs, Relation pull_idx, const int* col, const Pull& p,
               Snapshot snap, ItemPointerData* picks, Choice* out) {
    *out = Choice{};
    Keys running{};
    int64 total = count_running(s, jobs, col, p, snap, &running);
    int64 budget = p.n;
    if (p.max_running >= 0 && p.max_running - total < budget) budget = p.max_running - total;
    // No free slot: the statement's window is empty, which settles the pull.
    if (budget <= 0) return true;

    const int64 window = 32 + 4 * p.n;
    auto* win = static_cast<Candidate*>(palloc(sizeof(Candidate) * window));
    int64 seen = 0;
    TupleTableSlot* slot = table_slot_create(jobs, nullptr);
    bool isnull;
    auto consider = [&]() {
        int64 id = DatumGetInt64(slot_getattr(slot, col[kId], &isnull));
        if (p.n_inflight > 0 &&
            bsearch(&id, p.inflight, p.n_inflight, sizeof(int64), compare_ids) != nullptr)
            return;
        Datum state = slot_getattr(slot, col[kState], &isnull);
        if (isnull || DatumGetObjectId(state) != p.available) return;
        win[seen].tid = slot->tts_tid;
        win[seen].pos = {DatumGetInt16(slot_getattr(slot, col[kPriority], &isnull)),
                         DatumGetTimestampTz(slot_getattr(slot, col[kRunAt], &isnull)), id};
        win[seen].key = text_of(slot, col[kConcurrencyKey], true);
        ++seen;
    };
    // The first leaf page without a scan (a B-tree scan checks the rest of the page it lands on
    // against its keys before it returns anything: include/hopper/leaf_walk.hpp), then the scan
    // from where that stopped, as a claim that resumes at the queue's hint reads.
    const claim_hint::Key first =
        p.start != nullptr ? *p.start : claim_hint::Key{PG_INT16_MIN, DT_NOBEGIN, PG_INT64_MIN};
    claim_hint::Key resume = first;
    bool scan_needed = true;
    if (leaf_walk::usable(pull_idx)) {
        auto* tids = static_cast<ItemPointerData*>(palloc(sizeof(ItemPointerData) * window));
        leaf_walk::Walk w = leaf_walk::candidates(pull_idx, p.queue, first, p.at, snap, tids,
                                                  static_cast<int>(window));
        IndexFetchTableData* fetch = table_index_fetch_begin(jobs);
        for (int i = 0; i < w.found && seen < window; ++i) {
            bool call_again = false;
            bool all_dead = false;
            if (table_index_fetch_tuple(fetch, &tids[i], snap, slot, &call_again, &all_dead))
                consider();
        }
        table_index_fetch_end(fetch);
        scan_needed = !w.exhausted;
        resume = w.next;
    }
    if (seen < window && scan_needed) {
        ScanKeyData keys[3];
        ScanKeyData row[3];
        int nkeys = leaf_walk::scan_keys(pull_idx, p.queue, &resume, p.at, keys, row);
        IndexScanDesc scan = index_beginscan(jobs, pull_idx, snap, nkeys, 0);
        index_rescan(scan, keys, nkeys, nullptr, 0);
        while (seen < window && index_getnext_slot(scan, ForwardScanDirection, slot)) consider();
        index_endscan(scan);
    }

    // The window's keys, each with its free count.
    auto* wk = static_cast<WindowKey*>(palloc(sizeof(WindowKey) * (seen > 0 ? seen : 1)));
    int nk = 0;
    for (int64 i = 0; i < seen; ++i)
        if (win[i].key.data != nullptr) wk[nk++] = {win[i].key, 0, 0};
    qsort(wk, nk, sizeof(WindowKey), compare_window_keys);
    int distinct = 0;
    for (int i = 0; i < nk; ++i)
        if (distinct == 0 || compare_keys(wk[distinct - 1].key, wk[i].key) != 0)
            wk[distinct++] = wk[i];
    if (running.n > 1) qsort(running.items, running.n, sizeof(Key), compare_key_ptrs);
    if (distinct > 0) {
        Relation kl = s.key_limits;
        TupleTableSlot* kslot = table_slot_create(kl, nullptr);
        IndexScanDesc kscan = index_beginscan(kl, s.key_limits_pkey, snap, 2, 0);
        for (int i = 0; i < distinct; ++i) {
            int32 limit = key_limit(s, kscan, kslot, p, wk[i].key);
            int64 f = budget;
            if (limit >= 0) {
                int64 left = limit - count_equal(running, wk[i].key);
                if (left < f) f = left;
            }
            wk[i].free = f > 0 ? f : 0;
        }
        index_endscan(kscan);
        ExecDropSingleTupleTableSlot(kslot);
    }

    // Each key's first free jobs and every unkeyed one, in pull order, up to the budget.
    for (int64 i = 0; i < seen && out->n_picks < budget; ++i) {
        if (win[i].key.data != nullptr) {
            WindowKey probe{win[i].key, 0, 0};
            auto* k = static_cast<WindowKey*>(
                bsearch(&probe, wk, distinct, sizeof(WindowKey), compare_window_keys));
            if (k->taken >= k->free) {
                if (!out->passed) out->first_passed = win[i].pos;
                out->passed = true;
                continue;
            }
            ++k->taken;
        }
        picks[out->n_picks++] = win[i].tid;
    }
    ExecDropSingleTupleTableSlot(slot);
    if (out->n_picks < budget && seen == window) {
        *out = Choice{};
        return false;
    }
    return true;
}

}  // namespace

bool open(Relation jobs, const int* col, Source* s) {
    *s = Source{};
    int v[kValues];
    if (!layout(jobs, col, v)) return false;
    Oid limits = static_cast<Oid>(v[kKeyLimits]);
    if (!direct_access::may(limits, ACL_SELECT)) return false;
    Oid pkey = RelationGetPrimaryKeyIndex(jobs);
    if (!OidIsValid(pkey)) return false;
    s->key_limits = table_open(limits, AccessShareLock);
    if (s->key_limits->rd_rel->relrowsecurity) {
        close(s);
        return false;
    }
    s->jobs_pkey = index_open(pkey, AccessShareLock);
    const int id[1] = {col[kId]};
    if (!btree_on(s->jobs_pkey, jobs, id, 1) ||
        TupleDescAttr(RelationGetDescr(jobs), col[kId] - 1)->atttypid != INT8OID) {
        close(s);
        return false;
    }
    s->lease_idx = index_open(static_cast<Oid>(v[kLeaseIdx]), AccessShareLock);
    s->key_limits_pkey = index_open(static_cast<Oid>(v[kKeyLimitsPkey]), AccessShareLock);
    s->key_limits_max = v[kKeyLimitsMax];
    return true;
}

void close(Source* s) {
    if (s->key_limits_pkey != nullptr) index_close(s->key_limits_pkey, NoLock);
    if (s->lease_idx != nullptr) index_close(s->lease_idx, NoLock);
    if (s->jobs_pkey != nullptr) index_close(s->jobs_pkey, NoLock);
    if (s->key_limits != nullptr) table_close(s->key_limits, NoLock);
    *s = Source{};
}

bool choose(const Source& s, Relation jobs, Relation pull_idx, const int* col, const Pull& p,
            Snapshot snap, ItemPointerData* picks, Choice* out) {
    // Everything but the picks is scratch, let go on return: a waiting pull chooses again on
    // each attempt within one call.
    MemoryContext scratch =
        AllocSetContextCreate(CurrentMemoryContext, "hopper limited window", ALLOCSET_SMALL_SIZES);
    MemoryContext old = MemoryContextSwitchTo(scratch);
    bool settled = choose_in(s, jobs, pull_idx, col, p, snap, picks, out);
    MemoryContextSwitchTo(old);
    MemoryContextDelete(scratch);
    return settled;
}

}  // namespace hopper::limited_window
