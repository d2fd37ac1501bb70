// See include/hopper/batches.hpp.
#include <algorithm>
#include <unordered_set>

#include "hopper/batch_insert.hpp"
#include "hopper/batches.hpp"
#include "hopper/claim_hint.hpp"
#include "hopper/guc.hpp"
#include "hopper/notify.hpp"
#include "hopper/queue_lock.hpp"
#include "hopper/relcache_watch.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "catalog/namespace.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
}

namespace hopper::batches {
namespace {

// The ids are drawn in one pass, in payload order, only when the queue takes packed rows; then
// each slice of kJobsPerRow ($8) jobs becomes one row.
spi::Statement& insert_statement() {
    static spi::Statement st(
        "WITH q AS (SELECT name, max_attempts, packed FROM hopper.queues "
        "  WHERE name = $1 AND NOT limited), "
        "i AS MATERIALIZED (SELECT pg_catalog.array_agg(pg_catalog.nextval('hopper.job_id_seq')) "
        "  AS ids FROM pg_catalog.generate_series(1, $7) g WHERE EXISTS (SELECT 1 FROM q)) "
        "INSERT INTO hopper.job_batches (first_id, last_id, queue, priority, run_at, created_at, "
        "  kind, max_attempts, ids, payloads) "
        "SELECT i.ids[s], i.ids[e], q.name, $3, COALESCE($2, pg_catalog.now()), pg_catalog.now(), "
        "  $5, COALESCE($4, q.max_attempts), i.ids[s:e], "
        "  $6[s + pg_catalog.array_lower($6, 1) - 1 : e + pg_catalog.array_lower($6, 1) - 1] "
        "FROM q, i, pg_catalog.generate_series(1, $7, $8) s, "
        "  LATERAL (SELECT LEAST(s + $8 - 1, $7)) x(e) "
        "ORDER BY s RETURNING ids, (SELECT packed FROM q), run_at::pg_catalog.timestamptz",
        {TEXTOID, TIMESTAMPTZOID, INT2OID, INT4OID, TEXTOID, JSONBARRAYOID, INT4OID, INT4OID},
        CURSOR_OPT_GENERIC_PLAN);
    return st;
}

// The rows' waiting jobs become ordinary available rows (state, attempt and the rest take their
// defaults, as at a push); answers the lowest key among them and how many there were.
#define HOPPER_UNPACK_SQL(which_rows)                                                          \
    "WITH b AS (DELETE FROM hopper.job_batches WHERE " which_rows                              \
    " RETURNING *), "                                                                          \
    "ins AS (INSERT INTO hopper.jobs (id, queue, priority, run_at, max_attempts, created_at, " \
    "kind, "                                                                                   \
    "  payload) "                                                                              \
    "  SELECT u.id, b.queue, b.priority, b.run_at, b.max_attempts, b.created_at, b.kind, "     \
    "    u.payload FROM b, ROWS FROM (pg_catalog.unnest(b.ids[b.taken + 1 :]), "               \
    "    pg_catalog.unnest(b.payloads[b.taken + 1 :])) u(id, payload) "                        \
    "  RETURNING priority, run_at, id, queue) "                                                \
    "SELECT priority, run_at, id, pg_catalog.count(*) OVER (), queue FROM ins "                \
    "ORDER BY priority, run_at, id LIMIT 1"

// Rows another transaction holds are passed over, not waited for: see the header.
spi::Statement& unpack_queue_statement() {
    static spi::Statement st(
        HOPPER_UNPACK_SQL("first_id = ANY (ARRAY(SELECT s.first_id FROM hopper.job_batches s "
                          "WHERE s.queue = $1 FOR UPDATE SKIP LOCKED))"),
        {TEXTOID}, CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
    return st;
}

// The row holding waiting job id, if any.
spi::Statement& unpack_job_statement() {
    static spi::Statement st(
        HOPPER_UNPACK_SQL(
            "first_id = (SELECT f.first_id FROM hopper.job_batches f " HOPPER_PACKED_ROW_OF(
                "f", "$1") ")"),
        {INT8OID}, spi::Planning::kWalkIndexes);
    return st;
}

#undef HOPPER_UNPACK_SQL

// Unpacked jobs sit in jobs_pull_idx from their key on: a claim hint above it must come down.
int64_t unpacked(const spi::Result& r) {
    if (r.empty()) return 0;
    claim_hint::made_available(
        r.get_text(0, 5), {r.get_int16(0, 1), r.get_timestamptz(0, 2), r.get_int64(0, 3)}, false);
    return r.get_int64(0, 4);
}

}  // namespace

namespace {
std::unordered_set<std::string> packed_queues;
// hopper.queues when a queue was remembered; every change of a mark invalidates its relcache entry
// (the trigger hopper.queues_changed), and then the memory starts over.
Oid queues_relid = InvalidOid;
bool callback_registered = false;

void on_relcache_invalidation(Oid relid) {
    if (relid == InvalidOid || relid == queues_relid) packed_queues.clear();
}

// The ids of the rows the SQL INSERT returned, in payload order.
std::vector<int64_t> returned_ids(const spi::Result& r, int64_t jobs) {
    std::vector<int64_t> ids;
    ids.reserve(static_cast<size_t>(jobs));
    for (uint64_t row = 0; row < r.rows(); ++row) {
        bool isnull = false;
        Datum d = r.datum(row, 1, &isnull);
        const int64* v = nullptr;
        int n = 0;
        pg_guard([&] {
            ArrayType* arr = DatumGetArrayTypeP(d);
            n = ArrayGetNItems(ARR_NDIM(arr), ARR_DIMS(arr));
            v = reinterpret_cast<const int64*>(ARR_DATA_PTR(arr));
        });
        ids.insert(ids.end(), v, v + n);
    }
    // Rows come back in insert order, which is slice order; sorting only guards that.
    std::sort(ids.begin(), ids.end());
    return ids;
}

// The queue's mark lock (kMarkLockKey1), to the end of the transaction, in `mode`. Whether it was
// granted (always, unless dont_wait).
bool take_mark_lock(const std::string& queue, LOCKMODE mode, bool dont_wait) {
    return queue_lock::acquire(queue_lock::tag(kMarkLockKey1, queue_lock::hash(queue)), mode,
                               dont_wait) != LOCKACQUIRE_NOT_AVAIL;
}
}  // namespace

bool seen_packed(const std::string& queue) {
    return packed_queues.count(queue) > 0;
}

bool marks_packed(const spi::Result& r, int col, const std::string& queue) {
    if (r.empty() || !r.is_null(0, 1) || r.is_null(0, col) || !r.get_bool(0, col)) return false;
    pg_guard([] {
        if (!callback_registered) {
            relcache_watch::subscribe(on_relcache_invalidation);
            callback_registered = true;
        }
        queues_relid = get_relname_relid("queues", get_namespace_oid("hopper", false));
    });
    packed_queues.insert(queue);
    return true;
}

bool unmark_if_drained(spi::Connection& conn, const std::string& queue) {
    if (IsolationUsesXactSnapshot()) return false;
    if (!take_mark_lock(queue, ExclusiveLock, /*dont_wait=*/true)) return false;
    // The statement's snapshot follows the lock, so it sees every packed push that committed
    // before it. The queue's row is skipped, not waited for, if someone holds it.
    static spi::Statement clear(
        "WITH q AS (SELECT name FROM hopper.queues WHERE name = $1 AND packed "
        "  FOR NO KEY UPDATE SKIP LOCKED) "
        "UPDATE hopper.queues u SET packed = false FROM q WHERE u.name = q.name "
        "  AND NOT EXISTS (SELECT 1 FROM hopper.job_batches b WHERE b.queue = $1) RETURNING 1",
        {TEXTOID});
    return !conn.exec(clear, {spi::arg_text(queue)}).empty();
}

bool packable(int64_t jobs, int64_t payload_bytes, bool any_key,
              std::optional<TimestampTz> run_at) {
    return guc::pack_batches && jobs >= 2 && !any_key &&
           payload_bytes <= jobs * kMaxPackedPayloadBytes &&
           (!run_at || *run_at <= GetCurrentTransactionStartTimestamp()) &&
           !IsolationUsesXactSnapshot();
}

std::optional<std::vector<int64_t>> push(spi::Connection& conn, const Push& batch,
                                         std::optional<TimestampTz>* stored_at) {
    // Held from before the mark is read until the push commits (kMarkLockKey1).
    (void)take_mark_lock(batch.queue, ShareLock, /*dont_wait=*/false);
    static spi::Statement queue_row(
        "SELECT max_attempts, packed FROM hopper.queues WHERE name = $1 AND NOT limited",
        {TEXTOID});
    spi::Result q = conn.exec(queue_row, {spi::arg_text(batch.queue)});
    if (q.empty()) return std::nullopt;
    bool marked = q.get_bool(0, 2);
    // The queue's first packed push marks it below, holding the queue's row until it commits. A
    // push that finds the row held by another transaction (another first packed push, most
    // likely) writes a row per job instead of waiting: waiting queued every packed push behind the
    // first one's transaction, and two transactions marking two queues in opposite orders
    // deadlocked. If the holder has marked the queue and committed meanwhile, the mark is read
    // again; a clear cannot slip in, since this push holds the mark lock.
    if (!marked) {
        static spi::Statement hold_row(
            "SELECT packed FROM hopper.queues WHERE name = $1 FOR NO KEY UPDATE SKIP LOCKED",
            {TEXTOID});
        spi::Result held = conn.exec(hold_row, {spi::arg_text(batch.queue)});
        if (held.empty()) {
            spi::Result now = conn.exec(queue_row, {spi::arg_text(batch.queue)});
            if (now.empty() || !now.get_bool(0, 2)) return std::nullopt;
            marked = true;
        } else {
            marked = held.get_bool(0, 1);
        }
    }
    std::optional<std::vector<int64_t>> ids =
        insert_direct(batch, batch.max_attempts.value_or(q.get_int32(0, 1)));
    if (!ids) {
        spi::Result r = conn.exec(
            insert_statement(),
            {spi::arg_text(batch.queue),
             batch.run_at ? spi::arg_datum(TimestampTzGetDatum(*batch.run_at)) : spi::null_arg(),
             spi::arg_datum(Int16GetDatum(batch.priority)),
             batch.max_attempts ? spi::arg_int4(*batch.max_attempts) : spi::null_arg(),
             spi::arg_text(batch.kind), spi::arg_datum(batch.payloads),
             spi::arg_int4(static_cast<int32_t>(batch.jobs)), spi::arg_int4(kJobsPerRow)});
        if (r.empty()) return std::nullopt;
        marked = r.get_bool(0, 2);
        *stored_at = r.get_timestamptz(0, 3);
        ids = returned_ids(r, batch.jobs);
    }
    // The queue's first packed push marks it, in the same transaction as its rows: claims read
    // packed rows only on marked queues. Later pushes find the mark and write nothing more, until
    // the reaper clears it (kMarkLockKey1).
    if (!marked) {
        static spi::Statement mark(
            "UPDATE hopper.queues SET packed = true WHERE name = $1 AND NOT packed", {TEXTOID});
        conn.exec(mark, {spi::arg_text(batch.queue)});
    }
    return ids;
}

int64_t unpack_queue(spi::Connection& conn, const std::string& queue) {
    return unpacked(conn.exec(unpack_queue_statement(), {spi::arg_text(queue)}));
}

bool unpack_job(spi::Connection& conn, int64_t id) {
    return unpacked(conn.exec(unpack_job_statement(), {spi::arg(id)})) > 0;
}

void wake_after_packed_claim(const std::string& queue) {
    notify::wake_pulls_at_commit(queue, 1);
}

}  // namespace hopper::batches
