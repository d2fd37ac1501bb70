// Queues: create, drop, pause, resume, purge.
#include "hopper/args.hpp"
#include "hopper/claim_hint.hpp"
#include "hopper/guc.hpp"
#include "hopper/limits.hpp"
#include "hopper/notify.hpp"
#include "hopper/queue_lock.hpp"
#include "hopper/queues.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "storage/lock.h"
#include "storage/proc.h"
}

namespace hopper::queues {
namespace {

[[noreturn]] void no_such_queue(const std::string& queue) {
    throw PgError(ERRCODE_NO_DATA_FOUND, "queue \"" + queue + "\" does not exist", {},
                  "Create it with hopper.queue_create(), or push to it with "
                  "hopper.auto_create_queues on.");
}

bool insert_if_absent(spi::Connection& conn, const std::string& queue) {
    static spi::Statement st(
        "INSERT INTO hopper.queues (name) VALUES ($1) ON CONFLICT (name) DO NOTHING RETURNING name",
        {TEXTOID});
    return !conn.exec(st, {spi::arg_text(queue)}).empty();
}

LOCKTAG queue_tag(const std::string& queue) {
    return queue_lock::tag(kLockKey1, queue_lock::hash(queue));
}

LOCKTAG every_queue_tag() {
    return queue_lock::tag(kEveryQueueLockKey1, 0);
}

// How many queues' own locks the transaction counted_lxid took (hold).
LocalTransactionId counted_lxid = InvalidLocalTransactionId;
int queues_locked = 0;

}  // namespace

bool exists(spi::Connection& conn, const std::string& queue) {
    static spi::Statement st("SELECT 1 FROM hopper.queues WHERE name = $1", {TEXTOID});
    return !conn.exec(st, {spi::arg_text(queue)}).empty();
}

void require(spi::Connection& conn, const std::string& queue) {
    if (!exists(conn, queue)) no_such_queue(queue);
}

TimestampTz history_kept_since(spi::Connection& conn, const std::string& queue) {
    static spi::Statement st(
        "SELECT pg_catalog.clock_timestamp() - retention FROM hopper.queues WHERE name = $1",
        {TEXTOID});
    spi::Result r = conn.exec(st, {spi::arg_text(queue)});
    if (r.empty()) no_such_queue(queue);
    return r.get_timestamptz(0, 1);
}

bool exists(const std::string& queue) {
    spi::Connection conn;
    bool found = exists(conn, queue);
    conn.finish();
    return found;
}

void ensure(spi::Connection& conn, const std::string& queue) {
    if (!guc::auto_create_queues) return require(conn, queue);
    // Looked up first: an INSERT ... ON CONFLICT evaluates the table's CHECK constraints (parsing
    // them anew each time) before it finds the queue that is nearly always there.
    static spi::Statement exists("SELECT 1 FROM hopper.queues WHERE name = $1", {TEXTOID});
    if (conn.exec(exists, {spi::arg_text(queue)}).empty()) insert_if_absent(conn, queue);
}

bool hold(spi::Connection& conn, const std::string& queue, bool wait) {
    if (counted_lxid != MyProc->lxid) {
        counted_lxid = MyProc->lxid;
        queues_locked = 0;
    }
    LOCKTAG own = queue_tag(queue);
    bool alone = queues_locked < kQueuesLockedAlone;
    // Past kQueuesLockedAlone queues, a queue whose own lock the transaction holds already (a
    // schedule run takes it without waiting, then its push asks again) needs nothing more: asking
    // took the lock of every queue, and so waited for any drop in flight (which could deadlock
    // with it), without wait too. (Below that, asking again finds the lock held at no cost.)
    if (!alone && pg_guard([&] { return LockHeldByMe(&own, ShareLock); })) return true;
    LockAcquireResult r = alone ? queue_lock::acquire(own, ShareLock, !wait)
                                : queue_lock::acquire(every_queue_tag(), RowExclusiveLock, !wait);
    if (r == LOCKACQUIRE_NOT_AVAIL) return false;
    if (alone && r == LOCKACQUIRE_OK) ++queues_locked;
    if (IsolationUsesXactSnapshot()) {
        static spi::Statement row("SELECT 1 FROM hopper.queues WHERE name = $1 FOR KEY SHARE",
                                  {TEXTOID});
        conn.exec(row, {spi::arg_text(queue)});
    }
    return true;
}

void hold_exclusively(const std::string& queue) {
    queue_lock::acquire(queue_tag(queue), ExclusiveLock);
    queue_lock::acquire(every_queue_tag(), ShareLock);
    lock_deletes(queue);
}

void lock_deletes(const std::string& queue) {
    queue_lock::acquire(queue_lock::tag(kDeleteLockKey1, queue_lock::hash(queue)), ExclusiveLock);
    // The claims' lock of a limited queue before the queue's rows, as the limit functions and the
    // claims (checking the queue's row for a rate bucket they seed, or unpacking a packed row,
    // while they hold it) take them.
    limits::lock(queue);
}

}  // namespace hopper::queues

using namespace hopper;

HOPPER_FUNCTION(hopper_queue_create) {
    std::string queue = args::queue_name(fcinfo, 0);
    auto max_attempts = args::max_attempts(fcinfo, 1);
    constexpr int64_t day = int64_t(86400) * 1000000;
    // Stored as fixed lengths (args::Duration), as the claims and the reaper add them.
    auto lease = args::duration(fcinfo, 2, "lease", 0, args::kMaxLeaseUs);
    auto backoff_base = args::duration(fcinfo, 3, "backoff_base", 0, day);
    auto backoff_cap = args::duration(fcinfo, 4, "backoff_cap", 0, 30 * day);
    auto retention = args::duration(fcinfo, 5, "retention", 0, 3660 * day, /*allow_zero=*/true);
    if (!args::is_null(fcinfo, 6)) {
        float4 jitter = PG_GETARG_FLOAT4(6);
        if (!(jitter >= 0 && jitter <= 1))
            throw PgError(ERRCODE_INVALID_PARAMETER_VALUE, "jitter must be between 0 and 1");
    }

    spi::Connection conn;
    bool created = queues::insert_if_absent(conn, queue);
    static spi::Statement update(
        "UPDATE hopper.queues SET max_attempts = COALESCE($2, max_attempts), "
        "lease = COALESCE($3, lease), backoff_base = COALESCE($4, backoff_base), "
        "backoff_cap = COALESCE($5, backoff_cap), retention = COALESCE($6, retention), "
        "jitter = COALESCE($7, jitter) WHERE name = $1",
        {TEXTOID, INT4OID, INTERVALOID, INTERVALOID, INTERVALOID, INTERVALOID, FLOAT4OID});
    auto d = [](const std::optional<args::Duration>& v) {
        return spi::arg_datum(args::duration_datum(v), !v);
    };
    conn.exec(update,
              {spi::arg_text(queue), max_attempts ? spi::arg_int4(*max_attempts) : spi::null_arg(),
               d(lease), d(backoff_base), d(backoff_cap), d(retention),
               spi::arg_datum(PG_GETARG_DATUM(6), args::is_null(fcinfo, 6))});
    conn.finish();
    PG_RETURN_BOOL(created);
}

HOPPER_FUNCTION(hopper_queue_drop) {
    std::string queue = args::queue_name(fcinfo, 0);
    spi::Connection conn;
    queues::hold_exclusively(queue);
    static spi::Statement drop("DELETE FROM hopper.queues WHERE name = $1 RETURNING name",
                               {TEXTOID});
    // Packed rows before hopper.jobs: an unpack that holds one of the rows is waited for, and its
    // jobs are in hopper.jobs by the time the next statement looks there.
    static spi::Statement packed("DELETE FROM hopper.job_batches WHERE queue = $1", {TEXTOID});
    static spi::Statement jobs("DELETE FROM hopper.jobs WHERE queue = $1", {TEXTOID});
    static spi::Statement history("DELETE FROM hopper.job_history WHERE queue = $1", {TEXTOID});
    // The queue's schedules and limits: their foreign keys' cascades delete them, as the tables'
    // owner (a role allowed to drop queues needs no rights on them), but those are triggers, which
    // do not fire under session_replication_role = replica. A schedule left behind there made the
    // queue again at its next run, with the old limits listed and not enforced.
    static spi::Statement settings(
        "WITH s AS (DELETE FROM hopper.schedules WHERE queue = $1), "
        "k AS (DELETE FROM hopper.queue_key_limits WHERE queue = $1) "
        "DELETE FROM hopper.rate_limits WHERE queue = $1",
        {TEXTOID});
    bool existed = !conn.exec(drop, {spi::arg_text(queue)}).empty();
    if (SessionReplicationRole == SESSION_REPLICATION_ROLE_REPLICA)
        conn.exec(settings, {spi::arg_text(queue)});
    claim_hint::clear_at_end(queue);  // a queue made again under the name starts afresh
    conn.exec(packed, {spi::arg_text(queue)});
    conn.exec(jobs, {spi::arg_text(queue)});
    conn.exec(history, {spi::arg_text(queue)});
    conn.finish();
    PG_RETURN_BOOL(existed);
}

static Datum set_paused(FunctionCallInfo fcinfo, bool paused) {
    std::string queue = args::queue_name(fcinfo, 0);
    spi::Connection conn;
    // As a push: a drop in flight is waited for (its UPDATE would find the old row gone, and a
    // re-creation in the same transaction would go unchanged), and none starts before commit.
    queues::hold(conn, queue);
    static spi::Statement st("UPDATE hopper.queues SET paused = $2 WHERE name = $1 RETURNING name",
                             {TEXTOID, BOOLOID});
    if (conn.exec(st, {spi::arg_text(queue), spi::arg_bool(paused)}).empty())
        queues::require(conn, queue);
    conn.finish();
    // Resuming makes waiting jobs claimable again: wake the workers.
    if (!paused) notify::queue_ready(queue);
    PG_RETURN_VOID();
}

HOPPER_FUNCTION(hopper_queue_pause) {
    return set_paused(fcinfo, true);
}

HOPPER_FUNCTION(hopper_queue_resume) {
    return set_paused(fcinfo, false);
}

HOPPER_FUNCTION(hopper_queue_purge) {
    std::string queue = args::queue_name(fcinfo, 0);
    spi::Connection conn;
    queues::lock_deletes(queue);
    queues::require(conn, queue);
    // Running jobs are left to finish: their workers hold leases on them.
    static spi::Statement st(
        "DELETE FROM hopper.jobs WHERE queue = $1 AND state OPERATOR(pg_catalog.=) 'available'",
        {TEXTOID});
    // A packed row holds only waiting jobs, those past its taken ones: counted on the version the
    // delete removes, so that jobs a claim took from its front meanwhile are not counted.
    // Packed rows go first: an unpack that holds one of them is waited for, and its jobs are in
    // hopper.jobs by the time the statement above looks there.
    static spi::Statement packed(
        "WITH b AS (DELETE FROM hopper.job_batches WHERE queue = $1 "
        "  RETURNING pg_catalog.cardinality(ids) - taken AS waiting) "
        "SELECT COALESCE(pg_catalog.sum(waiting), 0)::bigint FROM b",
        {TEXTOID});
    claim_hint::clear_database_on_rollback();
    int64_t purged = conn.exec(packed, {spi::arg_text(queue)}).get_int64(0, 1);
    purged += static_cast<int64_t>(conn.exec(st, {spi::arg_text(queue)}).rows());
    conn.finish();
    PG_RETURN_INT64(purged);
}
