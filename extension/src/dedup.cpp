// See include/hopper/dedup.hpp.
#include "hopper/dedup.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "nodes/parsenodes.h"
#include "utils/timestamp.h"
}

namespace hopper::dedup {
namespace {

// Finished within the window ($3 microseconds). finished_at >= created_at (HOPPER_FINISHED_AT,
// include/hopper/sql.hpp), so the window bounds
// finished_at too, and $4 (see finished_before) bounds it from above: the executor then skips the
// daily history partitions outside, the older ones and the week ahead the reaper keeps ready.
// pg_catalog has no *(bigint, interval) (the bigint becomes a float8): one planted on the caller's
// search_path would win over it, so the multiplication names its schema.
#define HOPPER_WINDOW_START \
    "pg_catalog.now() - ($3 OPERATOR(pg_catalog.*) interval '1 microsecond')"
#define HOPPER_IN_WINDOW(h)                                                                  \
    h ".created_at >= " HOPPER_WINDOW_START " AND " h ".finished_at >= " HOPPER_WINDOW_START \
      " AND " h ".finished_at < $4"

// A bound above every finished_at the next snapshot can see: a finished job's finished_at is its
// finishing transaction's start, or the job's creation or start if later, all before that
// transaction's commit, which a snapshot taken after this clock reading sees only if it happened
// before. The hour covers clock adjustments.
Datum finished_before() {
    return TimestampTzGetDatum(GetCurrentTimestamp() + int64_t(3600) * USECS_PER_SEC);
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> undo_duplicates(spi::Connection& conn,
                                                         const std::string& queue,
                                                         const std::vector<int64_t>& ids,
                                                         int64_t window_us) {
    // Each new row by a primary-key lookup (OFFSET 0 keeps it one: otherwise the planner may
    // prefer scanning all keyed jobs through the partial dedup index). Planned once: a custom plan
    // over every history partition takes longer to make than to run. An unfinished original wins
    // over a finished one (as the unique index makes it for pushes without a window); only a
    // snapshot taken before the original finished (REPEATABLE READ) can still see it in
    // hopper.jobs here.
    static spi::Statement st(
        "WITH dup AS ("
        "  SELECT j.id AS new_id, o.id AS original FROM pg_catalog.unnest($2::bigint[]) AS m(id), "
        "  LATERAL (SELECT jj.id, jj.dedup_key FROM hopper.jobs jj WHERE jj.id = m.id OFFSET 0) j, "
        "  LATERAL ("
        "    SELECT u.id FROM ("
        "      SELECT 0 AS pref, x.id, x.created_at FROM hopper.jobs x "
        "       WHERE x.queue = $1 AND x.dedup_key = j.dedup_key AND x.id <> j.id "
        "      UNION ALL "
        "      SELECT 1, h.id, h.created_at FROM hopper.job_history h "
        "       WHERE h.queue = $1 AND h.dedup_key = j.dedup_key AND " HOPPER_IN_WINDOW("h")
        "    ) u ORDER BY u.pref, u.created_at, u.id LIMIT 1) o "
        "  WHERE j.dedup_key IS NOT NULL) "
        "DELETE FROM hopper.jobs d USING dup WHERE d.id = dup.new_id "
        "RETURNING dup.new_id, dup.original",
        {TEXTOID, INT8ARRAYOID, INT8OID, TIMESTAMPTZOID}, CURSOR_OPT_GENERIC_PLAN,
        spi::Planning::kWalkIndexes);
    std::vector<std::pair<int64_t, int64_t>> out;
    if (ids.empty()) return out;
    spi::Result r = conn.exec(st, {spi::arg_text(queue), spi::arg_int8_array(ids),
                                   spi::arg(window_us), spi::arg_datum(finished_before())});
    for (uint64_t i = 0; i < r.rows(); ++i) out.emplace_back(r.get_int64(i, 1), r.get_int64(i, 2));
    return out;
}

std::optional<int64_t> finished_within(spi::Connection& conn, const std::string& queue,
                                       const std::string& key, int64_t window_us) {
    static spi::Statement st(
        "SELECT h.id FROM hopper.job_history h "
        "WHERE h.queue = $1 AND h.dedup_key = $2 AND " HOPPER_IN_WINDOW(
            "h") " ORDER BY h.created_at, h.id LIMIT 1",
        {TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID}, CURSOR_OPT_GENERIC_PLAN,
        spi::Planning::kWalkIndexes);
    spi::Result r = conn.exec(st, {spi::arg_text(queue), spi::arg_text(key), spi::arg(window_us),
                                   spi::arg_datum(finished_before())});
    if (r.empty()) return std::nullopt;
    return r.get_int64(0, 1);
}

void refuse_unseen(spi::Connection& conn, const std::string& queue,
                   const std::vector<std::optional<std::string>>& keys, int64_t window_us) {
    // finished_within's lookup, for all the keys at once.
    static spi::Statement st(
        "SELECT k.dedup_key FROM pg_catalog.unnest($2::text[]) AS k(dedup_key) "
        "WHERE EXISTS (SELECT FROM hopper.job_history h "
        "  WHERE h.queue = $1 AND h.dedup_key = k.dedup_key AND " HOPPER_IN_WINDOW("h") ") "
        "LIMIT 1",
        {TEXTOID, TEXTARRAYOID, INT8OID, TIMESTAMPTZOID}, CURSOR_OPT_GENERIC_PLAN,
        spi::Planning::kWalkIndexes);
    if (keys.empty()) return;
    spi::Result r = conn.exec_latest(st, {spi::arg_text(queue), spi::arg_text_array(keys),
                                          spi::arg(window_us), spi::arg_datum(finished_before())});
    if (r.empty()) return;
    throw PgError(ERRCODE_T_R_SERIALIZATION_FAILURE,
                  "could not push to queue \"" + queue + "\": the job with dedup key \"" +
                      r.get_text(0, 1) + "\" finished after this transaction's snapshot was taken",
                  "The job is within the dedup window, but a REPEATABLE READ or SERIALIZABLE "
                  "transaction sees neither it nor its finish, so the push can neither return it "
                  "nor make a second job.",
                  "Retry the transaction.");
}

}  // namespace hopper::dedup
