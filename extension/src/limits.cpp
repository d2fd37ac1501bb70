// Concurrency limits: queue_set_concurrency, queue_set_key_limit, and queue_limits (what is
// configured, what runs, what the buckets hold). Enforcement is in limited_claim.cpp.
#include <optional>
#include <string>

#include "hopper/args.hpp"
#include "hopper/limits.hpp"
#include "hopper/queues.hpp"
#include "hopper/result.hpp"

extern "C" {
#include "catalog/pg_type.h"
}

using namespace hopper;

namespace {

// A limit on running jobs: NULL (none) or 1..kMaxLimit.
std::optional<int32_t> running_limit(FunctionCallInfo fcinfo, int n, const char* argname) {
    if (args::is_null(fcinfo, n)) return std::nullopt;
    int32_t v = PG_GETARG_INT32(n);
    if (v < 1 || v > limits::kMaxLimit)
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                      std::string(argname) + " must be between 1 and " +
                          std::to_string(limits::kMaxLimit) + ", got " + std::to_string(v),
                      {}, "Pass NULL for no limit.");
    return v;
}

spi::Arg opt_int4(const std::optional<int32_t>& v) {
    return v ? spi::arg_int4(*v) : spi::null_arg();
}

}  // namespace

// queue_set_concurrency(queue, max_running, key_max_running): the queue-wide cap on running jobs
// and the default limit per concurrency key. Lowering a limit below what runs stops nothing: new
// claims wait until enough jobs have finished.
HOPPER_FUNCTION(hopper_queue_set_concurrency) {
    std::string queue = args::queue_name(fcinfo, 0);
    auto max_running = running_limit(fcinfo, 1, "max_running");
    auto key_max_running = running_limit(fcinfo, 2, "key_max_running");
    spi::Connection conn;
    limits::lock_queue(conn, queue);
    static spi::Statement st(
        "UPDATE hopper.queues SET max_running = $2, key_max_running = $3 WHERE name = $1",
        {TEXTOID, INT4OID, INT4OID});
    conn.exec(st, {spi::arg_text(queue), opt_int4(max_running), opt_int4(key_max_running)});
    limits::refresh_limited(conn, queue);
    conn.finish();
    PG_RETURN_VOID();
}

// queue_set_key_limit(queue, concurrency_key, max_running): one key's limit, overriding the
// queue's key_max_running; NULL removes the override.
HOPPER_FUNCTION(hopper_queue_set_key_limit) {
    std::string queue = args::queue_name(fcinfo, 0);
    if (args::is_null(fcinfo, 1))
        throw PgError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "concurrency_key must not be NULL", {},
                      "Set the queue's default for every key with hopper.queue_set_concurrency().");
    std::string key = args::required_text(fcinfo, 1, "concurrency_key", args::kMaxKey);
    auto max_running = running_limit(fcinfo, 2, "max_running");
    spi::Connection conn;
    limits::lock_queue(conn, queue);
    if (max_running) {
        static spi::Statement set(
            "INSERT INTO hopper.queue_key_limits (queue, concurrency_key, max_running) "
            "VALUES ($1, $2, $3) ON CONFLICT (queue, concurrency_key) "
            "DO UPDATE SET max_running = EXCLUDED.max_running",
            {TEXTOID, TEXTOID, INT4OID});
        conn.exec(set, {spi::arg_text(queue), spi::arg_text(key), spi::arg_int4(*max_running)});
    } else {
        static spi::Statement remove(
            "DELETE FROM hopper.queue_key_limits WHERE queue = $1 AND concurrency_key = $2",
            {TEXTOID, TEXTOID});
        conn.exec(remove, {spi::arg_text(queue), spi::arg_text(key)});
    }
    limits::refresh_limited(conn, queue);
    conn.finish();
    PG_RETURN_VOID();
}

// queue_limits(queue) -> setof (scope, concurrency_key, max_running, running, max_claims, per,
// tokens): 'queue' (its cap, all its running jobs, its bucket), 'key default' (key_max_running),
// and one 'key' row per key with an override, a bucket or running jobs, with its effective limit.
// Tokens are shown refilled up to now.
HOPPER_FUNCTION(hopper_queue_limits) {
    std::string queue = args::queue_name(fcinfo, 0);
    static spi::Statement st(
        "WITH q AS (SELECT * FROM hopper.queues WHERE name = $1), "
        "running AS (SELECT concurrency_key AS key, pg_catalog.count(*) AS n FROM hopper.jobs "
        "  WHERE queue = $1 AND lease_until IS NOT NULL AND state OPERATOR(pg_catalog.=) 'running' "
        "  GROUP BY concurrency_key), "
        "buckets AS (SELECT b.concurrency_key AS key, b.max_claims, b.period, "
        "  LEAST(b.max_claims::float8, b.tokens + b.max_claims::float8 * GREATEST(0::float8, "
        "    pg_catalog.date_part('epoch', pg_catalog.now() - b.refilled_at)) / "
        "    pg_catalog.date_part('epoch', b.period)) AS tokens "
        "  FROM hopper.rate_limits b WHERE b.queue = $1), "
        "keyed AS (SELECT concurrency_key AS key FROM hopper.queue_key_limits WHERE queue = $1 "
        "  UNION SELECT key FROM buckets WHERE key IS NOT NULL "
        "  UNION SELECT key FROM running WHERE key IS NOT NULL) "
        "SELECT 'queue'::text, NULL::text, q.max_running, "
        "  (SELECT COALESCE(pg_catalog.sum(n), 0)::bigint FROM running), "
        "  b.max_claims, b.period, b.tokens, 0 AS o "
        "FROM q LEFT JOIN buckets b ON b.key IS NULL "
        "UNION ALL "
        "SELECT 'key default', NULL, q.key_max_running, NULL, q.key_max_claims, q.key_claims_per, "
        "  NULL, 1 FROM q "
        "UNION ALL "
        "SELECT 'key', k.key, COALESCE(kl.max_running, q.key_max_running), COALESCE(r.n, 0), "
        "  COALESCE(b.max_claims, q.key_max_claims), COALESCE(b.period, q.key_claims_per), "
        "  COALESCE(b.tokens, q.key_max_claims::float8), 2 "
        "FROM keyed k CROSS JOIN q "
        "LEFT JOIN hopper.queue_key_limits kl ON kl.queue = $1 AND kl.concurrency_key = k.key "
        "LEFT JOIN running r ON r.key = k.key LEFT JOIN buckets b ON b.key = k.key "
        "ORDER BY 8, 2",
        {TEXTOID});
    result::SetResult out(fcinfo);
    spi::Connection conn;
    queues::require(conn, queue);
    spi::Result r = conn.exec(st, {spi::arg_text(queue)});
    for (uint64_t i = 0; i < r.rows(); ++i) out.add_row(r, i);
    conn.finish();
    return (Datum)0;
}
