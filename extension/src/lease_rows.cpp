// See include/hopper/lease_rows.hpp.
#include "hopper/lease_rows.hpp"

namespace hopper::lease_rows {
namespace {

// Enough for a worker that holds a few batches of 100 at once; more only costs index descents.
constexpr int kSlots = 512;

struct Slot {
    Oid table;
    int64_t id;
    int64_t token;
    ItemPointerData tid;
};

Slot slots[kSlots];

Slot& slot_of(int64_t id) {
    return slots[static_cast<uint64_t>(id) % kSlots];
}

}  // namespace

void remember(Oid table, int64_t id, int64_t token, ItemPointer tid) {
    Slot& s = slot_of(id);
    s.table = table;
    s.id = id;
    s.token = token;
    ItemPointerCopy(tid, &s.tid);
}

bool recall(Oid table, int64_t id, int64_t token, ItemPointerData* tid) {
    Slot& s = slot_of(id);
    if (s.table != table || s.id != id || s.token != token || !OidIsValid(table)) return false;
    ItemPointerCopy(&s.tid, tid);
    s.table = InvalidOid;
    return true;
}

}  // namespace hopper::lease_rows
