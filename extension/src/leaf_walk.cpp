// See include/hopper/leaf_walk.hpp.
#include <cstring>

#include "hopper/leaf_walk.hpp"

extern "C" {
#include "access/genam.h"
#include "access/nbtree.h"
#include "pgstat.h"
#include "storage/bufmgr.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/fmgroids.h"
#include "utils/timestamp.h"
}

namespace hopper::leaf_walk {
namespace {

constexpr int kColumns = 4;  // queue, priority, run_at, id

// Byte equality of two texts, which deterministic collations make the same as texteq. A value
// stored compressed or out of line (never a queue name in practice) is not compared: false.
bool same_text(Datum stored, Datum wanted, bool* comparable) {
    auto* s = reinterpret_cast<struct varlena*>(DatumGetPointer(stored));
    auto* w = reinterpret_cast<struct varlena*>(DatumGetPointer(wanted));
    *comparable = !VARATT_IS_EXTENDED(s) || VARATT_IS_SHORT(s);
    if (!*comparable) return false;
    Size len = VARSIZE_ANY_EXHDR(s);
    return len == VARSIZE_ANY_EXHDR(w) && std::memcmp(VARDATA_ANY(s), VARDATA_ANY(w), len) == 0;
}

}  // namespace

bool usable(Relation idx) {
    for (int i = 0; i < kColumns; ++i)
        if (idx->rd_indoption[i] != 0) return false;
    Oid collation = idx->rd_indcollation[0];
    return OidIsValid(collation) && get_collation_isdeterministic(collation);
}

Walk candidates(Relation idx, Datum queue, const claim_hint::Key& start, TimestampTz at,
                Snapshot snap, ItemPointerData* tids, int max) {
    Walk w{0, false, start};
    pgstat_count_index_scan(idx);

    // An insertion key for (queue, priority, run_at, id) >= the start, as _bt_first builds one for
    // the scan's row comparison.
    BTScanInsertData key;
    _bt_metaversion(idx, &key.heapkeyspace, &key.allequalimage);
    key.anynullkeys = false;
    key.nextkey = false;
    key.pivotsearch = false;
    key.scantid = nullptr;
    key.keysz = kColumns;
    const Datum values[kColumns] = {queue, Int16GetDatum(start.priority),
                                    TimestampTzGetDatum(start.run_at), Int64GetDatum(start.id)};
    for (int i = 0; i < kColumns; ++i)
        ScanKeyEntryInitializeWithInfo(&key.scankeys[i], 0, i + 1, InvalidStrategy, InvalidOid,
                                       idx->rd_indcollation[i],
                                       index_getprocinfo(idx, i + 1, BTORDER_PROC), values[i]);

    Buffer buf;
    BTStack stack = _bt_search(idx, &key, &buf, BT_READ, snap);
    _bt_freestack(stack);
    if (!BufferIsValid(buf)) {  // an empty index has no root
        w.exhausted = true;
        return w;
    }
    Page page = BufferGetPage(buf);
    BTPageOpaque opaque = BTPageGetOpaque(page);
    OffsetNumber maxoff = PageGetMaxOffsetNumber(page);
    // The first entry >= the key (what the scan's _bt_binsrch finds).
    OffsetNumber low = P_FIRSTDATAKEY(opaque);
    OffsetNumber high = OffsetNumberNext(maxoff);
    while (low < high) {
        OffsetNumber mid = low + (high - low) / 2;
        if (_bt_compare(idx, &key, page, mid) > 0)
            low = OffsetNumberNext(mid);
        else
            high = mid;
    }

    TupleDesc desc = RelationGetDescr(idx);
    bool reached_end = true;
    bool last_taken = false;
    for (OffsetNumber off = low; off <= maxoff; off = OffsetNumberNext(off)) {
        ItemId item = PageGetItemId(page, off);
        auto itup = reinterpret_cast<IndexTuple>(PageGetItem(page, item));
        bool nulls[kColumns];
        Datum v[kColumns];
        for (int i = 0; i < kColumns; ++i) v[i] = index_getattr(itup, i + 1, desc, &nulls[i]);
        if (nulls[0] || nulls[1] || nulls[2] || nulls[3]) {
            reached_end = false;  // not a row hopper wrote: the scan decides
            break;
        }
        bool comparable = false;
        if (!same_text(v[0], queue, &comparable)) {
            reached_end = false;
            w.exhausted = comparable;  // past the queue's last entry
            break;
        }
        w.next = {DatumGetInt16(v[1]), DatumGetTimestampTz(v[2]), DatumGetInt64(v[3])};
        last_taken = false;
        if (ItemIdIsDead(item) || w.next.run_at > at) continue;
        bool posting = BTreeTupleIsPosting(itup);
        int n = posting ? BTreeTupleGetNPosting(itup) : 1;
        if (w.found + n > max) {
            reached_end = false;  // the scan starts at this entry
            break;
        }
        if (!posting)
            tids[w.found++] = itup->t_tid;
        else
            for (int i = 0; i < n; ++i) tids[w.found++] = *BTreeTupleGetPostingN(itup, i);
        last_taken = true;
    }
    // Every version of a job has the job's id in its key: once the entry is taken, the scan need
    // not see that key again.
    if (last_taken && w.next.id < PG_INT64_MAX) ++w.next.id;
    if (reached_end && P_RIGHTMOST(opaque)) w.exhausted = true;
    _bt_relbuf(idx, buf);
    return w;
}

int scan_keys(Relation idx, Datum queue, const claim_hint::Key* start, TimestampTz at,
              ScanKeyData* keys, ScanKeyData* row) {
    int nkeys = 0;
    ScanKeyEntryInitialize(&keys[nkeys++], 0, 1, BTEqualStrategyNumber, InvalidOid,
                           idx->rd_indcollation[0], F_TEXTEQ, queue);
    if (start != nullptr) {
        const Datum values[3] = {Int16GetDatum(start->priority), TimestampTzGetDatum(start->run_at),
                                 Int64GetDatum(start->id)};
        for (int i = 0; i < 3; ++i)
            ScanKeyEntryInitialize(&row[i], SK_ROW_MEMBER | (i == 2 ? SK_ROW_END : 0), i + 2,
                                   BTGreaterEqualStrategyNumber, InvalidOid,
                                   idx->rd_indcollation[i + 1],
                                   index_getprocid(idx, i + 2, BTORDER_PROC), values[i]);
        ScanKeyEntryInitialize(&keys[nkeys++], SK_ROW_HEADER, 2, BTGreaterEqualStrategyNumber,
                               InvalidOid, idx->rd_indcollation[1], InvalidOid,
                               PointerGetDatum(row));
    }
    ScanKeyEntryInitialize(&keys[nkeys++], 0, 3, BTLessEqualStrategyNumber, InvalidOid,
                           idx->rd_indcollation[2], F_TIMESTAMPTZ_LE, TimestampTzGetDatum(at));
    return nkeys;
}

}  // namespace hopper::leaf_walk
