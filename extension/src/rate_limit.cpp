// Rate limits: queue_set_rate_limit. Enforcement (token buckets refilled by the pull's clock) is in
// limited_claim.cpp.
#include <string>

#include "hopper/args.hpp"
#include "hopper/limits.hpp"

extern "C" {
#include "catalog/pg_type.h"
}

using namespace hopper;

// queue_set_rate_limit(queue, max_claims, per, concurrency_key = NULL, each_key = false): at most
// max_claims claims per `per` for the whole queue, for one key of it, or (each_key) for every key
// without a limit of its own; max_claims NULL removes the limit. A bucket starts (and restarts,
// when changed) full: a limit bounds the rate from now on, it does not make up for claims made
// before it was set.
HOPPER_FUNCTION(hopper_queue_set_rate_limit) {
    std::string queue = args::queue_name(fcinfo, 0);
    bool remove = args::is_null(fcinfo, 1);
    int32_t max_claims = remove ? 0 : PG_GETARG_INT32(1);
    if (!remove && (max_claims < 1 || max_claims > limits::kMaxLimit))
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                      "max_claims must be between 1 and " + std::to_string(limits::kMaxLimit) +
                          ", got " + std::to_string(max_claims),
                      {}, "Pass NULL to remove the rate limit.");
    if (!remove && args::is_null(fcinfo, 2))
        throw PgError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "per must not be NULL", {},
                      "Give the period, e.g. interval '1 minute'.");
    constexpr int64_t kMaxPeriodUs = int64_t(31) * 86400 * 1000000;
    // Stored as a fixed length (args::Duration), as the buckets refill by it.
    std::optional<args::Duration> period;
    if (!remove) period = args::duration(fcinfo, 2, "per", 0, kMaxPeriodUs);
    auto key = args::optional_text(fcinfo, 3, "concurrency_key", args::kMaxKey);
    bool each_key = !args::is_null(fcinfo, 4) && PG_GETARG_BOOL(4);
    if (each_key && key)
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                      "concurrency_key and each_key exclude each other", {},
                      "each_key sets the rate of every key without a limit of its own; "
                      "concurrency_key sets one key's.");
    spi::Arg per = spi::arg_datum(args::duration_datum(period), !period);

    spi::Connection conn;
    limits::lock_queue(conn, queue);
    if (each_key) {
        // The keys' buckets of the old default go: each key starts the new one full.
        static spi::Statement set(
            "UPDATE hopper.queues SET key_max_claims = $2, key_claims_per = $3 WHERE name = $1",
            {TEXTOID, INT4OID, INTERVALOID});
        static spi::Statement drop(
            "DELETE FROM hopper.rate_limits WHERE queue = $1 AND from_default", {TEXTOID});
        conn.exec(
            set, {spi::arg_text(queue), remove ? spi::null_arg() : spi::arg_int4(max_claims), per});
        conn.exec(drop, {spi::arg_text(queue)});
    } else if (remove) {
        static spi::Statement st(
            "DELETE FROM hopper.rate_limits WHERE queue = $1 "
            "AND concurrency_key IS NOT DISTINCT FROM $2 AND NOT from_default",
            {TEXTOID, TEXTOID});
        conn.exec(st, {spi::arg_text(queue), spi::arg_text(key)});
    } else {
        static spi::Statement st(
            "INSERT INTO hopper.rate_limits AS b (queue, concurrency_key, bucket, max_claims, "
            "  period, tokens, refilled_at) "
            "VALUES ($1, $2, COALESCE('k:' || $2, 'q'), $3, $4, $3, pg_catalog.now()) "
            "ON CONFLICT (queue, bucket) DO UPDATE SET max_claims = EXCLUDED.max_claims, "
            "  period = EXCLUDED.period, tokens = EXCLUDED.tokens, "
            "  refilled_at = EXCLUDED.refilled_at, from_default = false",
            {TEXTOID, TEXTOID, INT4OID, INTERVALOID});
        conn.exec(st, {spi::arg_text(queue), spi::arg_text(key), spi::arg_int4(max_claims), per});
    }
    limits::refresh_limited(conn, queue);
    conn.finish();
    PG_RETURN_VOID();
}
