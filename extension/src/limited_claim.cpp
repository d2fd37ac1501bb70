// The claim of a queue with limits; see include/hopper/limits.hpp.
#include <algorithm>

#include "hopper/args.hpp"
#include "hopper/as_owner.hpp"
#include "hopper/direct_access.hpp"
#include "hopper/inflight_claims.hpp"
#include "hopper/limits.hpp"
#include "hopper/notify.hpp"
#include "hopper/queue_lock.hpp"
#include "hopper/queue_rows.hpp"

extern "C" {
#include "miscadmin.h"
#include "access/xact.h"
#include "storage/proc.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
}

namespace hopper::limits {

namespace {

void release(uint32 hash) {
    LOCKTAG tag = queue_lock::tag(kLockKey1, hash);
    pg_guard([&] { LockRelease(&tag, ExclusiveLock, /*sessionLock=*/false); });
}

// Records the claimed jobs as in flight and lets the lock go; false (the lock kept to commit)
// if they do not fit. Not called when the claim took a job its own transaction wrote (pushed,
// retried, unpacked): the next claimer's snapshot cannot see that row at all, so it could not
// count it as in flight; it waits for the lock until this transaction ends instead.
bool record_and_release(uint32 hash, const std::vector<int64_t>& claimed) {
    if (!claimed.empty() && !inflight_claims::add(hash, claimed)) return false;
    release(hash);
    return true;
}

// What enter() asks of the queue's row, read as the direct claims read it: from the backend's
// memory of hopper.queues (include/hopper/queue_rows.hpp), or from the table when it has none.
// The limit functions change the row under the queue's lock and their invalidation is sent
// before they let it go, so under the lock the memory is as fresh as the statement's snapshot.
struct Probe {
    const char* name;
    int len;
    bool usable;  // false: the statement must ask
    bool limited;
    Entered entered;
};

// Plain C over PostgreSQL's API, run under pg_guard.
void probe_row(void* arg) {
    auto* p = static_cast<Probe*>(arg);
    p->usable = false;
    direct_access::Tables t;
    if (!direct_access::find_tables(&t) || !direct_access::may(t.queues, ACL_SELECT)) return;
    // As a statement would: see what came before in this transaction.
    CommandCounterIncrement();
    uint64_t generation = queue_rows::accept();
    PushActiveSnapshot(GetTransactionSnapshot());
    direct_access::QueueRow q{};
    bool ok = queue_rows::lookup(t.queues, p->name, p->len,
                                 PointerGetDatum(cstring_to_text_with_len(p->name, p->len)),
                                 GetActiveSnapshot(), generation, &q);
    PopActiveSnapshot();
    if (!ok) return;
    p->usable = true;
    p->limited = q.found && q.limited && !q.paused;
    p->entered.packed = q.packed;
    p->entered.early_release = !q.rated;
}

// The owner of hopper.rate_limits, whose rights spend() writes the buckets with. Looked up on
// each claim that spends (three catalog cache hits): the table may change hands.
Oid rate_limits_owner() {
    return pg_guard([] {
        Oid rel = get_relname_relid("rate_limits", get_namespace_oid("hopper", false));
        HeapTuple tuple =
            OidIsValid(rel) ? SearchSysCache1(RELOID, ObjectIdGetDatum(rel)) : nullptr;
        if (!HeapTupleIsValid(tuple))
            ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
                            errmsg("relation \"hopper.rate_limits\" does not exist")));
        Oid owner = reinterpret_cast<Form_pg_class>(GETSTRUCT(tuple))->relowner;
        ReleaseSysCache(tuple);
        return owner;
    });
}

// Takes the tokens of the jobs claimed (the rows of r with an id) from their buckets, seeding the
// keys' buckets under the per-key rate, with the rights of the buckets' owner: a role that may
// pull only reads hopper.rate_limits, so it cannot empty, freeze or lift a queue's rate for
// every other puller. `clock` was computed with the caller's rights (args::lease_clock: only a
// superuser's `at` runs the buckets' clock ahead of now), before the switch.
void spend(spi::Connection& conn, const std::string& queue, spi::Arg clock, const spi::Result& r) {
    std::vector<Datum> keys;
    std::vector<char> nulls;  // bool, for the C API
    keys.reserve(r.rows());
    nulls.reserve(r.rows());
    for (uint64_t i = 0; i < r.rows(); ++i) {
        if (r.is_null(i, 1)) continue;
        bool isnull;
        keys.push_back(r.datum(i, kKeyColumn, &isnull));
        nulls.push_back(isnull);
    }
    if (keys.empty()) return;
    Datum array = pg_guard([&] {
        int dims[1] = {static_cast<int>(keys.size())};
        int lbs[1] = {1};
        return PointerGetDatum(construct_md_array(keys.data(),
                                                  reinterpret_cast<bool*>(nulls.data()), 1, dims,
                                                  lbs, TEXTOID, -1, false, TYPALIGN_INT));
    });
    AsOwner as_owner(rate_limits_owner());
    conn.exec(spend_statement(), {spi::arg_text(queue), clock, spi::arg_datum(array)});
}

}  // namespace

namespace {

// The queues (their hashes) whose lock the transaction lxid took, for holds_any(); an entry whose
// hold was let go, or went with a rolled-back subtransaction, is answered by the lock manager.
std::vector<uint32> locked;
LocalTransactionId locked_in = InvalidLocalTransactionId;

}  // namespace

void lock(const std::string& queue) {
    uint32 hash = queue_lock::hash(queue);
    queue_lock::acquire(queue_lock::tag(kLockKey1, hash), ExclusiveLock);
    if (MyProc->lxid != locked_in) {
        locked.clear();
        locked_in = MyProc->lxid;
    }
    if (std::find(locked.begin(), locked.end(), hash) == locked.end()) locked.push_back(hash);
}

bool holds_any() {
    if (locked.empty() || MyProc->lxid != locked_in) return false;
    return pg_guard([] {
        for (uint32 hash : locked) {
            LOCKTAG tag = queue_lock::tag(kLockKey1, hash);
            if (LockHeldByMe(&tag, ExclusiveLock)) return true;
        }
        return false;
    });
}

bool enter(spi::Connection& conn, const std::string& queue, Entered* entered) {
    // Whether it may let the lock go before commit: not with rate limits, whose claims update
    // their buckets (a second claimer would spend tokens its snapshot did not see spent).
    static spi::Statement probe(
        "SELECT packed, NOT rated FROM hopper.queues WHERE name = $1 AND limited AND NOT paused",
        {TEXTOID}, CURSOR_OPT_GENERIC_PLAN);
    if (IsolationUsesXactSnapshot()) {
        if (conn.exec(probe, {spi::arg_text(queue)}).empty()) return false;
        throw PgError(ERRCODE_FEATURE_NOT_SUPPORTED,
                      "queue \"" + queue +
                          "\" has concurrency or rate limits: pulls from it need READ COMMITTED",
                      "Its claims are serialized by a lock, and a transaction snapshot taken "
                      "before that lock was granted would not see the claims made before it.",
                      "Pull in a READ COMMITTED transaction (the default isolation level).");
    }
    // The probe runs after the lock is granted, so that what it says of rate limits holds for
    // the claim made under it.
    lock(queue);
    Probe p{queue.data(), static_cast<int>(queue.size()), false, false, {}};
    detail::guarded_call(probe_row, &p);
    if (p.usable) {
        if (!p.limited) release(queue_lock::hash(queue));
        *entered = p.entered;
        if (p.limited) inflight_claims::mark_limited_pull();
        return p.limited;
    }
    spi::Result r = conn.exec(probe, {spi::arg_text(queue)});
    if (r.empty()) {
        release(queue_lock::hash(queue));
        return false;
    }
    entered->packed = r.get_bool(0, 1);
    entered->early_release = r.get_bool(0, 2);
    inflight_claims::mark_limited_pull();
    return true;
}

spi::Result claim(spi::Connection& conn, const std::string& queue, const ClaimArgs& a,
                  bool early_release, bool keys_only, bool* released) {
    *released = false;
    uint32 hash = queue_lock::hash(queue);
    // Read before the statement takes its snapshot: see include/hopper/inflight_claims.hpp.
    std::vector<int64_t> inflight;
    inflight_claims::read(hash, &inflight);
    Datum ids = pg_guard([&] {
        Datum* elems = static_cast<Datum*>(palloc(sizeof(Datum) * (inflight.size() + 1)));
        for (size_t i = 0; i < inflight.size(); ++i) elems[i] = Int64GetDatum(inflight[i]);
        return PointerGetDatum(construct_array(elems, static_cast<int>(inflight.size()), INT8OID,
                                               sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
    });
    // A queue that had no rate limits when the lock was granted has none while it is held.
    bool rated = !early_release;
    // Leases and the buckets are every puller's: only a superuser's `at` may run their clock
    // ahead of now. A worker's pull dated a year ahead would otherwise hand out year-long leases,
    // refill the buckets for itself and move their clock there, and no other pull would see a
    // token come back until then.
    spi::Arg clock =
        spi::arg_datum(TimestampTzGetDatum(args::lease_clock(DatumGetTimestampTz(a[1].value))));
    std::initializer_list<spi::Arg> args{
        a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], spi::arg_datum(ids), clock};
    spi::Result r = keys_only ? conn.exec(keys_statement(rated), args)
                              : conn.exec(window_statement(rated), args);
    if (!keys_only && !r.empty() && r.is_null(r.rows() - 1, 1))
        r = conn.exec(keys_statement(rated), args);
    if (rated) spend(conn, queue, clock, r);
    inflight_claims::claimed(queue, static_cast<int64_t>(r.rows()));
    if (!early_release) return r;
    std::vector<int64_t> claimed;
    claimed.reserve(r.rows());
    bool own_rows = false;
    for (uint64_t i = 0; i < r.rows(); ++i) {
        claimed.push_back(r.get_int64(i, 1));
        bool isnull;
        Datum xmin = r.datum(i, kOriginColumn, &isnull);
        if (!isnull && TransactionIdIsCurrentTransactionId(DatumGetTransactionId(xmin)))
            own_rows = true;
    }
    if (!own_rows) *released = record_and_release(hash, claimed);
    return r;
}

std::optional<direct_claim::Claimed> claim_direct(const direct_claim::Claim& c,
                                                  std::optional<int64_t> lease_us,
                                                  bool session_bound, bool* released,
                                                  bool* unsettled) {
    *released = false;
    *unsettled = false;
    uint32 hash = queue_lock::hash(c.queue);
    // Read before the claim takes its snapshot, as for the statements.
    std::vector<int64_t> inflight;
    inflight_claims::read(hash, &inflight);
    std::sort(inflight.begin(), inflight.end());
    auto claimed = direct_claim::lease_window(c, lease_us, session_bound, inflight);
    if (!claimed) return std::nullopt;
    if (claimed->unsettled) {
        *unsettled = true;
        return std::nullopt;
    }
    inflight_claims::claimed(c.queue, static_cast<int64_t>(claimed->rows.size()));
    std::vector<int64_t> ids;
    ids.reserve(claimed->rows.size());
    for (const auto& row : claimed->rows) ids.push_back(DatumGetInt64(row.values[0]));
    if (!claimed->own_rows) *released = record_and_release(hash, ids);
    return claimed;
}

void lock_queue(spi::Connection& conn, const std::string& queue) {
    // The pulls' lock as well: a change to the buckets then never meets a claim spending them
    // (a claim seeding a key's bucket while it is being set would otherwise collide with it).
    // Taken before the row, as a claim takes it before the row's key (seeding a bucket checks
    // the queue's row): the other order deadlocks with such a claim, and with queue_drop.
    lock(queue);
    // NO KEY: a claim's check of the row for a bucket it seeds is not held up by it.
    static spi::Statement st("SELECT 1 FROM hopper.queues WHERE name = $1 FOR NO KEY UPDATE",
                             {TEXTOID});
    if (conn.exec(st, {spi::arg_text(queue)}).empty())
        throw PgError(ERRCODE_NO_DATA_FOUND, "queue \"" + queue + "\" does not exist", {},
                      "Create it with hopper.queue_create() first.");
}

void refresh_limited(spi::Connection& conn, const std::string& queue) {
    // Written only when a flag changes: an update of the row invalidates every cached plan that
    // reads hopper.queues (its trigger sends the cache invalidation), so setting the limits of
    // many keys in one transaction re-planned after each of them (0.5-2 ms a call).
    static spi::Statement st(
        "UPDATE hopper.queues q SET limited = n.limited, rated = n.rated "
        "FROM (SELECT r.rated, (q.max_running IS NOT NULL OR q.key_max_running IS NOT NULL "
        "        OR r.rated OR EXISTS (SELECT 1 FROM hopper.queue_key_limits k "
        "                              WHERE k.queue = $1)) AS limited "
        "      FROM hopper.queues q, LATERAL (SELECT q.key_max_claims IS NOT NULL "
        "        OR EXISTS (SELECT 1 FROM hopper.rate_limits b WHERE b.queue = $1) AS rated) r "
        "      WHERE q.name = $1) n "
        "WHERE q.name = $1 AND (q.limited, q.rated) IS DISTINCT FROM (n.limited, n.rated)",
        {TEXTOID});
    conn.exec(st, {spi::arg_text(queue)});
    // A limit raised or removed frees slots: every pull waiting on the queue looks again.
    notify::wake_pulls_at_commit(queue, 0);
}

}  // namespace hopper::limits
