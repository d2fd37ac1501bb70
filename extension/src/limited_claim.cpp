// The claim of a queue with limits; see include/hopper/limits.hpp.
#include "hopper/inflight_claims.hpp"
#include "hopper/limits.hpp"

extern "C" {
#include "miscadmin.h"
#include "access/xact.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/builtins.h"
}

namespace hopper::limits {

namespace {

spi::Statement& claim_statement();

uint32 queue_hash(const std::string& queue) {
    return pg_guard([&] {
        text* name = cstring_to_text_with_len(queue.data(), static_cast<int>(queue.size()));
        auto h = static_cast<uint32>(DatumGetInt32(
            DirectFunctionCall1Coll(hashtext, DEFAULT_COLLATION_OID, PointerGetDatum(name))));
        pfree(name);
        return h;
    });
}

// The tag of pg_advisory_xact_lock(kLockKey1, hashtext(queue)).
LOCKTAG lock_tag(uint32 hash) {
    LOCKTAG tag;
    SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, kLockKey1, hash, 2);
    return tag;
}

void release(uint32 hash) {
    LOCKTAG tag = lock_tag(hash);
    pg_guard([&] { LockRelease(&tag, ExclusiveLock, /*sessionLock=*/false); });
}

}  // namespace

void lock(const std::string& queue) {
    LOCKTAG tag = lock_tag(queue_hash(queue));
    pg_guard([&] { LockAcquire(&tag, ExclusiveLock, /*sessionLock=*/false, /*dontWait=*/false); });
}

bool enter(spi::Connection& conn, const std::string& queue, Entered* entered) {
    // Whether it may let the lock go before commit: not with rate limits, whose claims update
    // their buckets (a second claimer would spend tokens its snapshot did not see spent).
    static spi::Statement probe(
        "SELECT packed, key_max_claims IS NULL AND NOT EXISTS ("
        "  SELECT 1 FROM hopper.rate_limits r WHERE r.queue = $1) "
        "FROM hopper.queues WHERE name = $1 AND limited AND NOT paused",
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
    spi::Result r = conn.exec(probe, {spi::arg_text(queue)});
    if (r.empty()) {
        release(queue_hash(queue));
        return false;
    }
    entered->packed = r.get_bool(0, 1);
    entered->early_release = r.get_bool(0, 2);
    return true;
}

spi::Result claim(spi::Connection& conn, const std::string& queue, const ClaimArgs& a,
                  bool early_release, bool* released) {
    *released = false;
    uint32 hash = queue_hash(queue);
    // Read before the statement takes its snapshot: see include/hopper/inflight_claims.hpp.
    std::vector<int64_t> inflight;
    inflight_claims::read(hash, &inflight);
    Datum ids = pg_guard([&] {
        Datum* elems = static_cast<Datum*>(palloc(sizeof(Datum) * (inflight.size() + 1)));
        for (size_t i = 0; i < inflight.size(); ++i) elems[i] = Int64GetDatum(inflight[i]);
        return PointerGetDatum(construct_array(elems, static_cast<int>(inflight.size()), INT8OID,
                                               sizeof(int64), FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
    });
    spi::Result r = conn.exec(claim_statement(), {a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7],
                                                  a[8], spi::arg_datum(ids)});
    if (!early_release) return r;
    std::vector<int64_t> claimed;
    claimed.reserve(r.rows());
    for (uint64_t i = 0; i < r.rows(); ++i) claimed.push_back(r.get_int64(i, 1));
    if (claimed.empty() || inflight_claims::add(hash, claimed)) {
        release(hash);
        *released = true;
    }
    return r;
}

// Bucket content at the pull's clock $2: refilled at max_claims per period since refilled_at (never
// backwards, so a pull that travels back in time neither refills nor drains), capped at max_claims.
#define HOPPER_BUCKET_NOW(b)                                    \
    "LEAST(" b ".max_claims::float8, " b ".tokens + " b         \
    ".max_claims::float8 * "                                    \
    "GREATEST(0::float8, pg_catalog.date_part('epoch', $2 - " b \
    ".refilled_at)) / "                                         \
    "pg_catalog.date_part('epoch', " b ".period))"

// How many jobs of key k.key this pull may claim: its limit minus its running jobs, its tokens,
// the pull's budget; with kl, r, b its override, running count and bucket joined in.
#define HOPPER_KEY_FREE                                                              \
    "GREATEST(0, LEAST((SELECT n FROM budget), "                                     \
    "COALESCE(kl.max_running, (SELECT key_max_running FROM q)) - COALESCE(r.n, 0), " \
    "COALESCE(b.avail, (SELECT key_max_claims FROM q))))::bigint"
#define HOPPER_KEY_JOINS                                                                    \
    "LEFT JOIN hopper.queue_key_limits kl ON kl.queue = $1 AND kl.concurrency_key = k.key " \
    "LEFT JOIN running r ON r.key = k.key LEFT JOIN buckets b ON b.key = k.key "
// The first jobs in pull order that this pull could take: a window larger than n, so that with
// many keys and few of them full it holds enough claimable jobs.
#define HOPPER_WINDOW "(32 + 4 * $3)"

namespace {
spi::Statement& claim_statement() {
    // $10: the jobs other transactions' limited claims hold (include/hopper/inflight_claims.hpp).
    // budget: how many jobs this pull may claim: n, the queue's free slots, the queue's tokens.
    // Two ways to find them, both exact:
    //  - win: the first jobs in pull order, each key's free count applied to its jobs among them.
    //    When that yields the budget, or the window held every due job, it is the answer
    //    ("settled"): cheap when full keys hold few of the first jobs, whatever the number of keys.
    //  - otherwise (full keys' backlogs fill the window): keys, the distinct keys with waiting
    //    jobs, one index descent each (a skip scan), so a full key with a long backlog costs one
    //    descent; each key's first free jobs and the first unkeyed jobs are merged in pull order.
    // Then the jobs are locked and claimed by primary key (few rows, whatever the estimates say),
    // and the tokens spent are taken from the queue's bucket (all claims) and each key's (its
    // claims); a key under the queue's per-key rate gets its bucket at its first claim
    // ("seeded").
    static spi::Statement st(
        "WITH RECURSIVE q AS MATERIALIZED ("
        "  SELECT lease, max_running, key_max_running, key_max_claims, key_claims_per "
        "  FROM hopper.queues "
        "  WHERE name = $1 AND NOT paused), "
        "running AS MATERIALIZED ("
        "  SELECT key, pg_catalog.count(*) AS n FROM ("
        "    SELECT concurrency_key AS key FROM hopper.jobs "
        "    WHERE queue = $1 AND lease_until IS NOT NULL AND state = 'running' "
        "    UNION ALL "
        "    SELECT concurrency_key FROM hopper.jobs "
        "    WHERE id = ANY ($10) AND queue = $1 AND state = 'available') r "
        "  GROUP BY key), "
        "buckets AS MATERIALIZED ("
        "  SELECT b.concurrency_key AS key, pg_catalog.floor(" HOPPER_BUCKET_NOW("b") ") AS avail "
        "  FROM hopper.rate_limits b WHERE b.queue = $1), "
        "budget AS MATERIALIZED ("
        "  SELECT GREATEST(0, LEAST($3, q.max_running - "
        "    (SELECT COALESCE(pg_catalog.sum(n), 0) FROM running), "
        "    (SELECT avail FROM buckets WHERE key IS NULL)))::bigint AS n FROM q), "
        "win AS MATERIALIZED ("
        "  SELECT id, priority, run_at, concurrency_key AS key FROM hopper.jobs "
        "  WHERE queue = $1 AND state = 'available' AND run_at <= $2 "
        "    AND ($5::text[] IS NULL OR kind = ANY ($5)) AND id <> ALL ($10) "
        "    AND (SELECT n FROM budget) > 0 "
        "  ORDER BY priority, run_at, id LIMIT " HOPPER_WINDOW "), "
        "win_free AS MATERIALIZED ("
        "  SELECT k.key, " HOPPER_KEY_FREE " AS n "
        "  FROM (SELECT DISTINCT key FROM win WHERE key IS NOT NULL) k " HOPPER_KEY_JOINS "), "
        "win_picked AS MATERIALIZED ("
        "  SELECT w.id FROM ("
        "    SELECT w.*, pg_catalog.row_number() OVER ("
        "      PARTITION BY w.key ORDER BY w.priority, w.run_at, w.id) AS rn FROM win w) w "
        "  LEFT JOIN win_free f ON f.key = w.key "
        "  WHERE w.key IS NULL OR w.rn <= f.n "
        "  ORDER BY w.priority, w.run_at, w.id LIMIT COALESCE((SELECT n FROM budget), 0)), "
        "settled AS MATERIALIZED ("
        "  SELECT (SELECT pg_catalog.count(*) FROM win_picked) >= "
        "           COALESCE((SELECT n FROM budget), 0) "
        "      OR (SELECT pg_catalog.count(*) FROM win) < " HOPPER_WINDOW " AS ok), "
        "keys(key) AS ("
        "  (SELECT concurrency_key FROM hopper.jobs "
        "   WHERE queue = $1 AND state = 'available' AND concurrency_key IS NOT NULL "
        "     AND NOT (SELECT ok FROM settled) "
        "   ORDER BY concurrency_key LIMIT 1) "
        "  UNION ALL "
        "  SELECT (SELECT j.concurrency_key FROM hopper.jobs j "
        "          WHERE j.queue = $1 AND j.state = 'available' AND j.concurrency_key IS NOT NULL "
        "            AND j.concurrency_key > k.key ORDER BY j.concurrency_key LIMIT 1) "
        "  FROM keys k WHERE k.key IS NOT NULL), "
        "free AS MATERIALIZED ("
        "  SELECT k.key, " HOPPER_KEY_FREE " AS n FROM keys k " HOPPER_KEY_JOINS
        "  WHERE k.key IS NOT NULL), "
        "picked AS MATERIALIZED ("
        "  SELECT id FROM win_picked WHERE (SELECT ok FROM settled) "
        "  UNION ALL "
        "  (SELECT c.id FROM ("
        "    SELECT j.id, j.priority, j.run_at FROM free f CROSS JOIN LATERAL ("
        "      SELECT id, priority, run_at FROM hopper.jobs "
        "      WHERE queue = $1 AND state = 'available' AND concurrency_key = f.key "
        "        AND run_at <= $2 AND ($5::text[] IS NULL OR kind = ANY ($5)) AND id <> ALL ($10) "
        "      ORDER BY priority, run_at, id LIMIT f.n) j "
        "    WHERE f.n > 0 "
        "    UNION ALL "
        "    (SELECT id, priority, run_at FROM hopper.jobs "
        "     WHERE queue = $1 AND state = 'available' AND concurrency_key IS NULL "
        "       AND run_at <= $2 AND ($5::text[] IS NULL OR kind = ANY ($5)) AND id <> ALL ($10) "
        "       AND NOT (SELECT ok FROM settled) "
        "     ORDER BY priority, run_at, id LIMIT COALESCE((SELECT n FROM budget), 0))) c "
        "  ORDER BY c.priority, c.run_at, c.id LIMIT COALESCE((SELECT n FROM budget), 0))), "
        "candidates AS MATERIALIZED ("
        "  SELECT j.id FROM hopper.jobs j WHERE j.id = ANY (ARRAY(SELECT id FROM picked)) "
        "    AND j.state = 'available' FOR UPDATE SKIP LOCKED), "
        "claimed AS ("
        "  UPDATE hopper.jobs j SET state = 'running', attempt = j.attempt + 1, "
        "    lease_token = pg_catalog.nextval('hopper.lease_token_seq'), "
        "    lease_until = $2 + COALESCE($4, (SELECT lease FROM q)), started_at = $2, worker = $6, "
        "    claimed_pid = $7, claimed_backend_start = $8, session_bound = $9 "
        "  WHERE j.id = ANY (ARRAY(SELECT id FROM candidates)) "
        "  RETURNING j.id, j.queue, j.kind, j.payload, j.attempt, j.lease_token, j.lease_until, "
        "    j.run_at, j.created_at, j.priority, j.concurrency_key), "
        "spent AS ("
        "  UPDATE hopper.rate_limits b SET tokens = " HOPPER_BUCKET_NOW("b") " - s.n, "
        "    refilled_at = GREATEST(b.refilled_at, $2) "
        "  FROM (SELECT concurrency_key AS key, GROUPING(concurrency_key) = 1 AS total, "
        "          pg_catalog.count(*) AS n "
        "        FROM claimed GROUP BY ROLLUP (concurrency_key) HAVING pg_catalog.count(*) > 0) s "
        "  WHERE b.queue = $1 AND ((s.total AND b.concurrency_key IS NULL) "
        "    OR (NOT s.total AND b.concurrency_key = s.key))), "
        "seeded AS ("
        "  INSERT INTO hopper.rate_limits (queue, concurrency_key, max_claims, period, tokens, "
        "    refilled_at, from_default) "
        "  SELECT $1, c.key, q.key_max_claims, q.key_claims_per, q.key_max_claims - c.n, $2, true "
        "  FROM (SELECT concurrency_key AS key, pg_catalog.count(*) AS n FROM claimed "
        "        WHERE concurrency_key IS NOT NULL GROUP BY concurrency_key) c, q "
        "  WHERE q.key_max_claims IS NOT NULL "
        "    AND NOT EXISTS (SELECT 1 FROM buckets b WHERE b.key = c.key)) "
        "SELECT id, queue, kind, payload, attempt, lease_token, lease_until, run_at, created_at, "
        "  priority FROM claimed ORDER BY priority, run_at, id",
        {TEXTOID, TIMESTAMPTZOID, INT8OID, INTERVALOID, TEXTARRAYOID, TEXTOID, INT4OID,
         TIMESTAMPTZOID, BOOLOID, INT8ARRAYOID},
        // Planning this statement takes longer than running it; its generic plan is the one
        // the indexes were laid out for, whatever the parameters.
        CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
    return st;
}
}  // namespace

#undef HOPPER_BUCKET_NOW
#undef HOPPER_KEY_FREE
#undef HOPPER_KEY_JOINS
#undef HOPPER_WINDOW

void lock_queue(spi::Connection& conn, const std::string& queue) {
    static spi::Statement st("SELECT 1 FROM hopper.queues WHERE name = $1 FOR UPDATE", {TEXTOID});
    if (conn.exec(st, {spi::arg_text(queue)}).empty())
        throw PgError(ERRCODE_NO_DATA_FOUND, "queue \"" + queue + "\" does not exist", {},
                      "Create it with hopper.queue_create() first.");
    // The pulls' lock as well: a change to the buckets then never meets a claim spending them
    // (a claim seeding a key's bucket while it is being set would otherwise collide with it).
    static spi::Statement lock(
        "SELECT pg_catalog.pg_advisory_xact_lock($1, pg_catalog.hashtext($2))", {INT4OID, TEXTOID});
    conn.exec(lock, {spi::arg_int4(static_cast<int32_t>(kLockKey1)), spi::arg_text(queue)});
}

void refresh_limited(spi::Connection& conn, const std::string& queue) {
    static spi::Statement st(
        "UPDATE hopper.queues q SET limited = (q.max_running IS NOT NULL "
        "  OR q.key_max_running IS NOT NULL OR q.key_max_claims IS NOT NULL "
        "  OR EXISTS (SELECT 1 FROM hopper.queue_key_limits k WHERE k.queue = q.name) "
        "  OR EXISTS (SELECT 1 FROM hopper.rate_limits r WHERE r.queue = q.name)) "
        "WHERE q.name = $1",
        {TEXTOID});
    conn.exec(st, {spi::arg_text(queue)});
}

}  // namespace hopper::limits
