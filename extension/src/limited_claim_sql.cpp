// The statements of the limited claim; see include/hopper/limits.hpp.
//
// Parameters: $1 queue, $2 the pull's clock, $3 n, $4 lease, $5 kinds, $6 worker, $7 claimer pid,
// $8 claimer backend start, $9 session_bound, $10 the jobs other transactions' limited claims hold
// (include/hopper/inflight_claims.hpp), $11 the clock leases and rate buckets run by
// (args::lease_clock($2): the pull's clock, held back to now unless a superuser pulls).
//
// Two ways to find the jobs, both exact, each its own statement:
//  - the window: the first jobs in pull order, each key's free count applied to its jobs among
//    them. When that yields the budget, or the window held every due job, it is the answer
//    ("settled"): cheap when full keys hold few of the first jobs, whatever the number of keys.
//    Otherwise it claims nothing and answers one row of NULLs;
//  - then the keys: the distinct keys with waiting jobs, one index descent each (a skip scan), so
//    a full key with a long backlog costs one descent; each key's first free jobs and the first
//    unkeyed jobs are merged in pull order.
// Then the jobs are locked and claimed by primary key (few rows, whatever the estimates say). On
// a queue with rate limits the budget counts the buckets' tokens; a queue without them gets
// statements without the buckets: every plan node costs its start-up and tear-down on each pull,
// more than the few rows most of them see. The tokens the claims spent are taken by a statement
// of their own, spend_statement(), which runs with the owner's rights (see claim()).
#include "hopper/limits.hpp"

extern "C" {
#include "catalog/pg_type.h"
}

namespace hopper::limits {

// Bucket content at the buckets' clock $11: refilled at max_claims per period since refilled_at
// (never backwards, so a pull that travels back in time neither refills nor drains), capped at
// max_claims.
#define HOPPER_BUCKET_NOW(b)                                     \
    "LEAST(" b ".max_claims::float8, " b ".tokens + " b          \
    ".max_claims::float8 * "                                     \
    "GREATEST(0::float8, pg_catalog.date_part('epoch', $11 - " b \
    ".refilled_at)) / "                                          \
    "pg_catalog.date_part('epoch', " b ".period))"

#define HOPPER_BUCKETS_CTE \
    "buckets AS MATERIALIZED ("                                                                    \
    "  SELECT b.concurrency_key AS key, pg_catalog.floor(" HOPPER_BUCKET_NOW("b") ") AS avail "    \
    "  FROM hopper.rate_limits b WHERE b.queue = $1), "

// The queue's settings, its running jobs per key (the committed ones and those in flight: a job
// in $10 that this snapshot still shows available), and the pull's budget: n, the queue's free
// slots and (queue_tokens) its tokens.
#define HOPPER_LIMITED_HEAD(buckets_cte, queue_tokens)                                             \
    "WITH RECURSIVE q AS MATERIALIZED ("                                                           \
    "  SELECT lease, max_running, key_max_running, key_max_claims, key_claims_per "                \
    "  FROM hopper.queues "                                                                        \
    "  WHERE name = $1 AND NOT paused), "                                                          \
    "running AS MATERIALIZED ("                                                                    \
    "  SELECT key, pg_catalog.count(*) AS n FROM ("                                                \
    "    SELECT concurrency_key AS key FROM hopper.jobs "                                          \
    "    WHERE queue = $1 AND lease_until IS NOT NULL AND state OPERATOR(pg_catalog.=) 'running' " \
    "    UNION ALL "                                                                               \
    "    SELECT concurrency_key FROM hopper.jobs "                                                 \
    "    WHERE id = ANY ($10) AND queue = $1 AND state OPERATOR(pg_catalog.=) 'available') r "     \
    "  GROUP BY key), " buckets_cte                                                                \
    "budget AS MATERIALIZED ("                                                                     \
    "  SELECT GREATEST(0, LEAST($3, q.max_running - "                                              \
    "    (SELECT COALESCE(pg_catalog.sum(n)::bigint, 0) FROM running)" queue_tokens                \
    "))::bigint "                                                                                  \
    "  AS n FROM q), "
#define HOPPER_QUEUE_TOKENS ", (SELECT avail FROM buckets WHERE key IS NULL)"

// How many jobs of key k.key this pull may claim: its limit minus its running jobs, the pull's
// budget and (key_tokens) its tokens; with kl, r (and b) its override, running count (and
// bucket) joined in.
#define HOPPER_KEY_FREE(key_tokens)                                                           \
    "GREATEST(0, LEAST((SELECT n FROM budget), "                                              \
    "COALESCE(kl.max_running, (SELECT key_max_running FROM q)) - COALESCE(r.n, 0)" key_tokens \
    "))::bigint"
#define HOPPER_KEY_TOKENS ", COALESCE(b.avail, (SELECT key_max_claims FROM q))"
#define HOPPER_KEY_JOINS(bucket_join)                                                       \
    "LEFT JOIN hopper.queue_key_limits kl ON kl.queue = $1 AND kl.concurrency_key = k.key " \
    "LEFT JOIN running r ON r.key = k.key " bucket_join
#define HOPPER_BUCKET_JOIN "LEFT JOIN buckets b ON b.key = k.key "

// The first jobs in pull order that this pull could take: a window larger than n, so that with
// many keys and few of them full it holds enough claimable jobs.
#define HOPPER_WINDOW "(32 + 4 * $3)"

#define HOPPER_WINDOW_PICK(key_free, key_joins)                                          \
    "win AS MATERIALIZED ("                                                              \
    "  SELECT id, priority, run_at, concurrency_key AS key FROM hopper.jobs "            \
    "  WHERE queue = $1 AND state OPERATOR(pg_catalog.=) 'available' AND run_at <= $2 "  \
    "    AND ($5::text[] IS NULL OR kind = ANY ($5)) AND id <> ALL ($10) "               \
    "    AND (SELECT n FROM budget) > 0 "                                                \
    "  ORDER BY priority, run_at, id LIMIT " HOPPER_WINDOW                               \
    "), "                                                                                \
    "win_free AS MATERIALIZED ("                                                         \
    "  SELECT k.key, " key_free                                                          \
    " AS n "                                                                             \
    "  FROM (SELECT DISTINCT key FROM win WHERE key IS NOT NULL) k " key_joins           \
    "), "                                                                                \
    "win_picked AS MATERIALIZED ("                                                       \
    "  SELECT w.id FROM ("                                                               \
    "    SELECT w.*, pg_catalog.row_number() OVER ("                                     \
    "      PARTITION BY w.key ORDER BY w.priority, w.run_at, w.id) AS rn FROM win w) w " \
    "  LEFT JOIN win_free f ON f.key = w.key "                                           \
    "  WHERE w.key IS NULL OR w.rn <= f.n "                                              \
    "  ORDER BY w.priority, w.run_at, w.id LIMIT COALESCE((SELECT n FROM budget), 0)), " \
    "settled AS MATERIALIZED ("                                                          \
    "  SELECT (SELECT pg_catalog.count(*) FROM win_picked) >= "                          \
    "           COALESCE((SELECT n FROM budget), 0) "                                    \
    "      OR (SELECT pg_catalog.count(*) FROM win) < " HOPPER_WINDOW                    \
    " AS ok), "                                                                          \
    "picked AS MATERIALIZED (SELECT id FROM win_picked WHERE (SELECT ok FROM settled)), "

#define HOPPER_KEYS_PICK(key_free, key_joins)                                                   \
    "keys(key) AS ("                                                                            \
    "  (SELECT concurrency_key FROM hopper.jobs "                                               \
    "   WHERE queue = $1 AND state OPERATOR(pg_catalog.=) 'available' "                         \
    "     AND concurrency_key IS NOT NULL "                                                     \
    "   ORDER BY concurrency_key LIMIT 1) "                                                     \
    "  UNION ALL "                                                                              \
    "  SELECT (SELECT j.concurrency_key FROM hopper.jobs j "                                    \
    "          WHERE j.queue = $1 AND j.state OPERATOR(pg_catalog.=) 'available' "              \
    "            AND j.concurrency_key IS NOT NULL "                                            \
    "            AND j.concurrency_key > k.key ORDER BY j.concurrency_key LIMIT 1) "            \
    "  FROM keys k WHERE k.key IS NOT NULL), "                                                  \
    "free AS MATERIALIZED ("                                                                    \
    "  SELECT k.key, " key_free " AS n FROM keys k " key_joins                                  \
    " WHERE k.key IS NOT NULL), "                                                               \
    "picked AS MATERIALIZED ("                                                                  \
    "  SELECT c.id FROM ("                                                                      \
    "    SELECT j.id, j.priority, j.run_at FROM free f CROSS JOIN LATERAL ("                    \
    "      SELECT id, priority, run_at FROM hopper.jobs "                                       \
    "      WHERE queue = $1 AND state OPERATOR(pg_catalog.=) 'available' "                      \
    "        AND concurrency_key = f.key "                                                      \
    "        AND run_at <= $2 AND ($5::text[] IS NULL OR kind = ANY ($5)) AND id <> ALL ($10) " \
    "      ORDER BY priority, run_at, id LIMIT f.n) j "                                         \
    "    WHERE f.n > 0 "                                                                        \
    "    UNION ALL "                                                                            \
    "    (SELECT id, priority, run_at FROM hopper.jobs "                                        \
    "     WHERE queue = $1 AND state OPERATOR(pg_catalog.=) 'available' "                       \
    "       AND concurrency_key IS NULL "                                                       \
    "       AND run_at <= $2 AND ($5::text[] IS NULL OR kind = ANY ($5)) AND id <> ALL ($10) "  \
    "     ORDER BY priority, run_at, id LIMIT COALESCE((SELECT n FROM budget), 0))) c "         \
    "  ORDER BY c.priority, c.run_at, c.id LIMIT COALESCE((SELECT n FROM budget), 0)), "

#define HOPPER_CLAIM_PICKED(marker)                                                               \
    "candidates AS MATERIALIZED ("                                                                \
    "  SELECT j.id, j.xmin FROM hopper.jobs j WHERE j.id = ANY (ARRAY(SELECT id FROM picked)) "   \
    "    AND j.state OPERATOR(pg_catalog.=) 'available' FOR UPDATE SKIP LOCKED), "                \
    "claimed AS ("                                                                                \
    "  UPDATE hopper.jobs j SET state = 'running', attempt = j.attempt + 1, "                     \
    "    lease_token = pg_catalog.nextval('hopper.lease_token_seq'), "                            \
    "    lease_until = $11 + COALESCE($4, (SELECT lease FROM q)), started_at = $11, worker = $6," \
    "    claimed_pid = $7, claimed_backend_start = $8, session_bound = $9 "                       \
    "  WHERE j.id = ANY (ARRAY(SELECT id FROM candidates)) "                                      \
    "  RETURNING j.id, j.queue, j.kind, j.payload, j.attempt, j.lease_token, j.lease_until, "     \
    "    j.run_at, j.created_at, j.priority, j.concurrency_key) "                                 \
    "SELECT l.id, l.queue, l.kind, l.payload, l.attempt, l.lease_token, l.lease_until, "          \
    "  l.run_at, l.created_at, l.priority, false, c.xmin, l.concurrency_key "                     \
    "FROM claimed l JOIN candidates c ON c.id = l.id" marker " ORDER BY priority, run_at, id"

// The window statement's answer when the window did not settle it.
#define HOPPER_UNSETTLED                                                             \
    " UNION ALL SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, " \
    "  NULL, NULL, NULL WHERE NOT (SELECT ok FROM settled)"

// The tokens of a claim: taken from the queue's bucket (all its jobs) and each key's (its jobs),
// and a key under the queue's per-key rate gets its bucket at its first claim ("seeded"), full but
// for what the claim spent. $1 queue, $2 the buckets' clock (the claim's $11), $3 the claimed jobs'
// keys, one element per job (NULL: unkeyed); never called for a claim of nothing. Run with the
// rights of hopper.rate_limits' owner, whatever the caller's search_path: every function,
// operator and type is named by schema, and OPERATOR() has no precedence of its own, hence the
// parentheses. A bucket's content is HOPPER_BUCKET_NOW's: the claim's budget was computed by it.
#define HOPPER_OWNED_BUCKET_NOW                                                                 \
    "LEAST(b.max_claims::pg_catalog.float8, b.tokens OPERATOR(pg_catalog.+) ("                  \
    "  (b.max_claims::pg_catalog.float8 OPERATOR(pg_catalog.*) GREATEST(0::pg_catalog.float8, " \
    "    pg_catalog.date_part('epoch'::pg_catalog.text, $2 OPERATOR(pg_catalog.-) "             \
    "b.refilled_at))) "                                                                         \
    "  OPERATOR(pg_catalog./) pg_catalog.date_part('epoch'::pg_catalog.text, b.period)))"

spi::Statement& spend_statement() {
    static spi::Statement st(
        "WITH s AS ("
        "  SELECT c.key, GROUPING(c.key) OPERATOR(pg_catalog.=) 1 AS total, "
        "    pg_catalog.count(*) AS n "
        "  FROM pg_catalog.unnest($3) AS c(key) GROUP BY ROLLUP (c.key)), "
        "spent AS ("
        "  UPDATE hopper.rate_limits b "
        "  SET tokens = " HOPPER_OWNED_BUCKET_NOW
        " OPERATOR(pg_catalog.-) s.n::pg_catalog.float8, "
        "    refilled_at = GREATEST(b.refilled_at, $2) "
        "  FROM s WHERE b.queue OPERATOR(pg_catalog.=) $1 "
        "    AND ((s.total AND b.concurrency_key IS NULL) "
        "      OR (NOT s.total AND b.concurrency_key OPERATOR(pg_catalog.=) s.key))) "
        "INSERT INTO hopper.rate_limits (queue, concurrency_key, bucket, max_claims, period, "
        "  tokens, refilled_at, from_default) "
        "SELECT $1, s.key, 'k:'::pg_catalog.text OPERATOR(pg_catalog.||) s.key, q.key_max_claims, "
        "  q.key_claims_per, "
        "  q.key_max_claims::pg_catalog.float8 OPERATOR(pg_catalog.-) s.n::pg_catalog.float8, "
        "  $2, true "
        "FROM s, hopper.queues q "
        "WHERE NOT s.total AND s.key IS NOT NULL AND q.name OPERATOR(pg_catalog.=) $1 "
        "  AND q.key_max_claims IS NOT NULL "
        "  AND NOT EXISTS (SELECT FROM hopper.rate_limits b "
        "    WHERE b.queue OPERATOR(pg_catalog.=) $1 "
        "      AND b.concurrency_key OPERATOR(pg_catalog.=) s.key)",
        {TEXTOID, TIMESTAMPTZOID, TEXTARRAYOID}, CURSOR_OPT_GENERIC_PLAN);
    return st;
}

#undef HOPPER_OWNED_BUCKET_NOW

#define HOPPER_LIMITED_PARAM_OIDS HOPPER_CLAIM_PARAM_OIDS, INT8ARRAYOID, TIMESTAMPTZOID

#define HOPPER_LIMITED_STATEMENT(sql)                                                   \
    static spi::Statement st(sql, {HOPPER_LIMITED_PARAM_OIDS}, CURSOR_OPT_GENERIC_PLAN, \
                             spi::Planning::kWalkIndexes);                              \
    return st

// Planning these statements takes longer than running them; their generic plans are the ones
// the indexes were laid out for, whatever the parameters.
spi::Statement& window_statement(bool rated) {
    if (rated) {
        HOPPER_LIMITED_STATEMENT(HOPPER_LIMITED_HEAD(HOPPER_BUCKETS_CTE, HOPPER_QUEUE_TOKENS)
                                     HOPPER_WINDOW_PICK(HOPPER_KEY_FREE(HOPPER_KEY_TOKENS),
                                                        HOPPER_KEY_JOINS(HOPPER_BUCKET_JOIN))
                                         HOPPER_CLAIM_PICKED(HOPPER_UNSETTLED));
    }
    HOPPER_LIMITED_STATEMENT(HOPPER_LIMITED_HEAD("", "") HOPPER_WINDOW_PICK(
        HOPPER_KEY_FREE(""), HOPPER_KEY_JOINS("")) HOPPER_CLAIM_PICKED(HOPPER_UNSETTLED));
}

spi::Statement& keys_statement(bool rated) {
    if (rated) {
        HOPPER_LIMITED_STATEMENT(HOPPER_LIMITED_HEAD(HOPPER_BUCKETS_CTE, HOPPER_QUEUE_TOKENS)
                                     HOPPER_KEYS_PICK(HOPPER_KEY_FREE(HOPPER_KEY_TOKENS),
                                                      HOPPER_KEY_JOINS(HOPPER_BUCKET_JOIN))
                                         HOPPER_CLAIM_PICKED(""));
    }
    HOPPER_LIMITED_STATEMENT(HOPPER_LIMITED_HEAD("", "") HOPPER_KEYS_PICK(
        HOPPER_KEY_FREE(""), HOPPER_KEY_JOINS("")) HOPPER_CLAIM_PICKED(""));
}

#undef HOPPER_BUCKET_NOW
#undef HOPPER_BUCKETS_CTE
#undef HOPPER_LIMITED_HEAD
#undef HOPPER_QUEUE_TOKENS
#undef HOPPER_KEY_FREE
#undef HOPPER_KEY_TOKENS
#undef HOPPER_KEY_JOINS
#undef HOPPER_BUCKET_JOIN
#undef HOPPER_WINDOW
#undef HOPPER_WINDOW_PICK
#undef HOPPER_KEYS_PICK
#undef HOPPER_CLAIM_PICKED
#undef HOPPER_UNSETTLED
#undef HOPPER_LIMITED_STATEMENT

}  // namespace hopper::limits
