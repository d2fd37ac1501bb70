// See include/hopper/lease_token.hpp.
#include "hopper/as_owner.hpp"
#include "hopper/boundary.hpp"
#include "hopper/lease_token.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "commands/sequence.h"
#include "storage/lmgr.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
}

namespace hopper::lease_token {
namespace {

constexpr int kTimelineShift = 48;
// The last timeline whose floor is a positive bigint.
constexpr TimeLineID kLastTimeline = TimeLineID{1} << (63 - kTimelineShift);

// This backend has seen the sequence at or above its timeline's floor.
bool ready = false;

struct Sequence {
    Oid relid;
    Oid owner;
};

// The floor of this server's timeline (0 for the first); -1 in recovery or a read-only
// transaction, whose claims fail as writes (25006) as they always did.
int64 timeline_floor() {
    if (RecoveryInProgress() || XactReadOnly) return -1;
    TimeLineID tli = GetWALInsertionTimeLine();
    if (tli > kLastTimeline)
        ereport(ERROR, (errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
                        errmsg("hopper cannot hand out fencing tokens on timeline %u", tli),
                        errdetail("Tokens of timeline N start above (N - 1) * 2^48; the last "
                                  "timeline that fits a bigint is %u.",
                                  kLastTimeline)));
    return static_cast<int64>(tli - 1) << kTimelineShift;
}

Sequence token_sequence() {
    Sequence s;
    s.relid = sequence();
    HeapTuple tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(s.relid));
    if (!HeapTupleIsValid(tuple))
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                        errmsg("hopper.lease_token_seq does not exist")));
    s.owner = reinterpret_cast<Form_pg_class>(GETSTRUCT(tuple))->relowner;
    ReleaseSysCache(tuple);
    return s;
}

}  // namespace

Oid sequence() {
    Oid relid = get_relname_relid("lease_token_seq", get_namespace_oid("hopper", false));
    if (!OidIsValid(relid))
        ereport(ERROR, (errcode(ERRCODE_UNDEFINED_OBJECT),
                        errmsg("hopper.lease_token_seq does not exist")));
    return relid;
}

void before_claims() {
    if (ready) return;
    int64 floor = pg_guard([] { return timeline_floor(); });
    if (floor < 0) return;
    if (floor == 0) {
        // The first timeline: nothing to move, ever, in this backend.
        ready = true;
        return;
    }
    Sequence seq = pg_guard([] { return token_sequence(); });
    // One backend at a time, until the sequence is past the floor. A claim draws from the sequence
    // only once its backend got here, so while the sequence is below the floor no token is being
    // handed out that the move below could hand out again. nextval and setval take
    // RowExclusiveLock, which this lock does not conflict with; held to the end of this check only
    // (the sequence's changes are not transactional either).
    bool below = pg_guard([&] {
        LockRelationOid(seq.relid, ShareUpdateExclusiveLock);
        // A value drawn and dropped: the caller may draw (USAGE) where it may not read.
        return nextval_internal(seq.relid, true) < floor;
    });
    if (below) {
        // Workers may draw tokens but not set the sequence: its owner sets it.
        AsOwner as_owner(seq.owner);
        pg_guard([&] {
            (void)DirectFunctionCall3(setval3_oid, ObjectIdGetDatum(seq.relid),
                                      Int64GetDatum(floor), BoolGetDatum(true));
        });
    }
    pg_guard([&] { UnlockRelationOid(seq.relid, ShareUpdateExclusiveLock); });
    ready = true;
}

}  // namespace hopper::lease_token
