// See include/hopper/claim_commit.hpp.
//
// "Every write came from queue_pull" is read off XactLastRecEnd, the end of the last WAL record
// this backend wrote in the transaction (0 until it writes one): a pull starting with it at 0, or
// where the previous pull left it, has nothing of anyone else's before it; at pre-commit it must
// still be where the last pull left it. Anything conservative that moves it (hint-bit full-page
// images with data checksums, say) only makes the commit synchronous.
#include "hopper/boundary.hpp"
#include "hopper/claim_commit.hpp"
#include "hopper/guc.hpp"
#include "hopper/lease_token.hpp"

extern "C" {
#include "access/relation.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "replication/syncrep.h"
#include "storage/bufmgr.h"
#include "utils/guc.h"
}

namespace hopper::claim_commit {
namespace {

bool callback_registered = false;
// This transaction's claims so far, and the end of the WAL they wrote. Reset at every end.
bool only_claims = false;
XLogRecPtr claims_end = InvalidXLogRecPtr;

void reset() noexcept {
    only_claims = false;
    claims_end = InvalidXLogRecPtr;
}

// The LSN of the last WAL record that advanced the token sequence: a token is handed out only
// after that record is written, so flushing up to it makes every token seen so far durable.
XLogRecPtr token_sequence_lsn() {
    Relation rel = relation_open(lease_token::sequence(), AccessShareLock);
    Buffer buf = ReadBuffer(rel, 0);
    LockBuffer(buf, BUFFER_LOCK_SHARE);
    XLogRecPtr lsn = PageGetLSN(BufferGetPage(buf));
    UnlockReleaseBuffer(buf);
    relation_close(rel, AccessShareLock);
    return lsn;
}

// With synchronous standbys a failover may promote one that never received the token's WAL,
// whatever was flushed here: such servers keep every claim synchronous.
bool synchronous_standbys() {
    return SyncRepStandbyNames != nullptr && SyncRepStandbyNames[0] != '\0';
}

void commit_without_flush() {
    if (!guc::async_claims || synchronous_commit <= SYNCHRONOUS_COMMIT_OFF ||
        synchronous_standbys())
        return;
    XLogFlush(token_sequence_lsn());
    (void)set_config_option("synchronous_commit", "off", PGC_USERSET, PGC_S_SESSION,
                            GUC_ACTION_LOCAL, true, 0, false);
    ereport(DEBUG1, (errmsg("hopper: a claim-only transaction commits without waiting for its "
                            "WAL flush")));
}

void on_transaction_event(XactEvent event, void*) {
    bool qualifies = event == XACT_EVENT_PRE_COMMIT && only_claims &&
                     claims_end != InvalidXLogRecPtr && XactLastRecEnd == claims_end;
    reset();
    // Before commit an ERROR still aborts the transaction cleanly.
    if (qualifies && !detail::capture_errors([] { pg_guard([] { commit_without_flush(); }); }))
        detail::raise_saved_error();
}

}  // namespace

void before_claim() {
    if (!callback_registered) {
        pg_guard([] { RegisterXactCallback(on_transaction_event, nullptr); });
        callback_registered = true;
    }
    bool clean =
        XactLastRecEnd == InvalidXLogRecPtr || (only_claims && XactLastRecEnd == claims_end);
    only_claims = clean;
}

void after_claim() {
    if (only_claims) claims_end = XactLastRecEnd;
}

void not_only_claims() {
    // A later pull's before_claim finds the WAL moved past claims_end and keeps it so.
    reset();
}

}  // namespace hopper::claim_commit
