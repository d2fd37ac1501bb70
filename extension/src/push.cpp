// Producers: queue_push and queue_push_batch.
#include <algorithm>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "hopper/args.hpp"
#include "hopper/batches.hpp"
#include "hopper/claim_hint.hpp"
#include "hopper/dedup.hpp"
#include "hopper/notify.hpp"
#include "hopper/push.hpp"
#include "hopper/push_insert.hpp"
#include "hopper/queue_defaults.hpp"
#include "hopper/queues.hpp"
#include "hopper/reaper.hpp"
#include "hopper/result.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/lsyscache.h"
}

using namespace hopper;

namespace {

// One statement per push on the hot path. The queue's max_attempts comes from this backend's
// memory of the queue (queue_defaults.hpp), so the INSERT reads no other table. A job without a
// dedup key can never conflict on jobs_dedup_idx, so its statement leaves out ON CONFLICT and the
// speculative insertion that comes with it (the arbiter pre-check, a speculative-insertion lock, a
// second write to confirm the row); a keyed job's statement returns no row on a dedup hit. It
// returns the run_at it stored, which the claim hint is told: a column of the operator's making
// (timestamptz(0), say) may have rounded it below the one asked for.
spi::Statement& insert_one(bool keyed) {
#define HOPPER_PUSH_INSERT(on_conflict)                                                  \
    "INSERT INTO hopper.jobs (queue, run_at, priority, max_attempts, created_at, kind, " \
    "dedup_key, concurrency_key, payload) "                                              \
    "VALUES ($1, COALESCE($2, pg_catalog.now()), $3, $4, pg_catalog.now(), $5, $6, $7, " \
    "$8) " on_conflict "RETURNING id, run_at::pg_catalog.timestamptz"
    static spi::Statement with_key(
        HOPPER_PUSH_INSERT(
            "ON CONFLICT (queue, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING "),
        {TEXTOID, TIMESTAMPTZOID, INT2OID, INT4OID, TEXTOID, TEXTOID, TEXTOID, JSONBOID});
    static spi::Statement without_key(
        HOPPER_PUSH_INSERT(""),
        {TEXTOID, TIMESTAMPTZOID, INT2OID, INT4OID, TEXTOID, TEXTOID, TEXTOID, JSONBOID});
#undef HOPPER_PUSH_INSERT
    return keyed ? with_key : without_key;
}

std::optional<int64_t> find_unfinished(spi::Connection& conn, const std::string& queue,
                                       const std::string& dedup_key) {
    static spi::Statement st("SELECT id FROM hopper.jobs WHERE queue = $1 AND dedup_key = $2",
                             {TEXTOID, TEXTOID}, spi::Planning::kWalkIndexes);
    spi::Result r = conn.exec(st, {spi::arg_text(queue), spi::arg_text(dedup_key)});
    if (r.empty()) return std::nullopt;
    return r.get_int64(0, 1);
}

std::optional<std::string> text_element(Datum d, bool isnull, const char* argname, int index,
                                        int max_len) {
    if (isnull) return std::nullopt;
    char* s = pg_guard([&] { return TextDatumGetCString(d); });
    std::string out(s);
    pfree(s);
    if (out.empty())
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                      std::string(argname) + "[" + std::to_string(index) +
                          "] must not be empty (use NULL for none)");
    if (out.size() > static_cast<size_t>(max_len))
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                      std::string(argname) + "[" + std::to_string(index) + "] is longer than " +
                          std::to_string(max_len) + " bytes");
    return out;
}

// dedup_window: NULL (no window) or more than 0 and at most ~10 years; needs keys to apply to.
std::optional<int64_t> dedup_window(FunctionCallInfo fcinfo, int n, bool have_keys,
                                    const char* keys_arg) {
    auto w = args::interval_us(fcinfo, n, "dedup_window", 0, dedup::kMaxWindowUs);
    if (w && !have_keys)
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                      std::string("dedup_window needs ") + keys_arg + " to apply to", {},
                      "Pass NULL as dedup_window, or give the job a dedup key.");
    return w;
}

struct ArrayView {
    std::vector<Datum> values;
    std::vector<char> nulls;
};

ArrayView deconstruct(Datum array_datum, Oid elemtype, const char* argname) {
    ArrayView v;
    Datum* elems = nullptr;
    bool* nulls = nullptr;
    int n = 0;
    pg_guard([&] {
        ArrayType* arr = DatumGetArrayTypeP(array_datum);
        if (ARR_NDIM(arr) > 1)
            ereport(ERROR, (errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
                            errmsg("%s must be a one-dimensional array", argname)));
        int16 typlen;
        bool typbyval;
        char typalign;
        get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
        deconstruct_array(arr, elemtype, typlen, typbyval, typalign, &elems, &nulls, &n);
    });
    v.values.assign(elems, elems + n);
    v.nulls.assign(nulls, nulls + n);
    return v;
}

// Tells the queue's claim hint that jobs appear from this key on when the push commits, and the
// queue's workers, if they are due by then.
void made_available(const std::string& queue, int16_t priority, std::optional<TimestampTz> run_at,
                    int64_t id, int64_t jobs) {
    TimestampTz now = GetCurrentTransactionStartTimestamp();
    TimestampTz at = run_at.value_or(now);
    claim_hint::made_available(queue, {priority, at, id}, at > now);
    notify::queue_pushed(queue, at, jobs);
}

}  // namespace

namespace hopper::push {

Pushed one(spi::Connection& conn, const Job& job) {
    std::optional<int64_t> id;
    bool inserted = false;
    queues::hold(conn, job.queue);
    // At most a few rounds: each one either inserts, finds the duplicate, or creates the queue.
    for (int round = 0; round < 4 && !id; ++round) {
        std::optional<int32_t> queue_max_attempts = queue_defaults::known(job.queue);
        if (!queue_max_attempts) queue_max_attempts = queue_defaults::look_up(conn, job.queue);
        if (!queue_max_attempts) {
            queues::ensure(conn, job.queue);
            continue;
        }
        int32_t max_attempts = job.max_attempts.value_or(*queue_max_attempts);
        if (!job.dedup_key) {
            if (auto direct = insert_direct(job, max_attempts)) {
                id = *direct;
                inserted = true;
                made_available(job.queue, job.priority, job.run_at, *id, 1);
                break;
            }
        }
        spi::Result r = conn.exec(
            insert_one(job.dedup_key.has_value()),
            {spi::arg_text(job.queue),
             job.run_at ? spi::arg_datum(TimestampTzGetDatum(*job.run_at)) : spi::null_arg(),
             spi::arg_datum(Int16GetDatum(job.priority)), spi::arg_int4(max_attempts),
             spi::arg_text(job.kind), spi::arg_text(job.dedup_key),
             spi::arg_text(job.concurrency_key), spi::arg_datum(job.payload)});
        if (!r.empty()) {
            id = r.get_int64(0, 1);
            inserted = true;
            if (job.dedup_window_us) {
                auto undone = dedup::undo_duplicates(conn, job.queue, {*id}, *job.dedup_window_us);
                if (!undone.empty()) {
                    id = undone.front().second;
                    inserted = false;
                    break;
                }
                // An original pushed and finished since the snapshot: see dedup.hpp.
                if (IsolationUsesXactSnapshot())
                    dedup::refuse_unseen(conn, job.queue, {*job.dedup_key}, *job.dedup_window_us);
            }
            made_available(job.queue, job.priority, r.get_timestamptz(0, 2), *id, 1);
            break;
        }
        if (job.dedup_key) id = find_unfinished(conn, job.queue, *job.dedup_key);
    }
    if (!id)
        throw PgError(
            ERRCODE_T_R_SERIALIZATION_FAILURE,
            "could not push to queue \"" + job.queue + "\": the deduplicated job kept changing", {},
            "Retry the push.");
    return {*id, inserted};
}

}  // namespace hopper::push

HOPPER_FUNCTION(hopper_queue_push) {
    push::Job job;
    job.queue = args::queue_name(fcinfo, 0);
    job.payload = args::payload(fcinfo, 1);
    job.run_at = args::run_at(fcinfo, 2);
    job.priority = args::priority(fcinfo, 3);
    job.kind = args::optional_text(fcinfo, 4, "kind", args::kMaxKind);
    job.max_attempts = args::max_attempts(fcinfo, 5);
    job.dedup_key = args::optional_text(fcinfo, 6, "dedup_key", args::kMaxKey);
    job.concurrency_key = args::optional_text(fcinfo, 7, "concurrency_key", args::kMaxKey);
    job.dedup_window_us = dedup_window(fcinfo, 8, job.dedup_key.has_value(), "dedup_key");

    spi::Connection conn;
    reaper::ensure_running(conn);
    int64_t id = push::one(conn, job).id;
    conn.finish();
    PG_RETURN_INT64(id);
}

HOPPER_FUNCTION(hopper_queue_push_batch) {
    std::string queue = args::queue_name(fcinfo, 0);
    if (args::is_null(fcinfo, 1))
        throw PgError(ERRCODE_NULL_VALUE_NOT_ALLOWED, "payloads must not be NULL");
    ArrayView payloads = deconstruct(PG_GETARG_DATUM(1), JSONBOID, "payloads");
    size_t n = payloads.values.size();
    auto run_at = args::run_at(fcinfo, 2);
    int16_t priority = args::priority(fcinfo, 3);
    auto kind = args::optional_text(fcinfo, 4, "kind", args::kMaxKind);
    auto max_attempts = args::max_attempts(fcinfo, 5);

    auto aligned_keys = [&](int argno, const char* argname) {
        std::vector<std::optional<std::string>> keys(n);
        if (args::is_null(fcinfo, argno)) return keys;
        ArrayView a = deconstruct(PG_GETARG_DATUM(argno), TEXTOID, argname);
        if (a.values.size() != n)
            throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                          std::string(argname) + " has " + std::to_string(a.values.size()) +
                              " elements but payloads has " + std::to_string(n),
                          {}, "Pass one key (or NULL) per payload.");
        for (size_t i = 0; i < n; ++i)
            keys[i] = text_element(a.values[i], a.nulls[i], argname, static_cast<int>(i + 1),
                                   args::kMaxKey);
        return keys;
    };
    auto dedup_keys = aligned_keys(6, "dedup_keys");
    auto concurrency_keys = aligned_keys(7, "concurrency_keys");
    bool any_key = std::any_of(dedup_keys.begin(), dedup_keys.end(),
                               [](const auto& k) { return k.has_value(); });
    auto window = dedup_window(fcinfo, 8, any_key, "dedup_keys");

    int64_t payload_bytes = 0;
    for (size_t i = 0; i < n; ++i) {
        std::string argname = "payloads[" + std::to_string(i + 1) + "]";
        if (payloads.nulls[i])
            throw PgError(ERRCODE_NULL_VALUE_NOT_ALLOWED, argname + " must not be NULL");
        Jsonb* jb = pg_guard([&] { return DatumGetJsonbP(payloads.values[i]); });
        args::check_payload(jb, argname.c_str());
        payload_bytes += VARSIZE(jb);
    }

    result::SetResult out(fcinfo);
    if (n == 0) return (Datum)0;

    spi::Connection conn;
    reaper::ensure_running(conn);
    queues::hold(conn, queue);

    auto answer = [&](const std::vector<int64_t>& ids) {
        for (int64_t id : ids) {
            Datum v = Int64GetDatum(id);
            bool isnull = false;
            out.add_values(&v, &isnull);
        }
        return (Datum)0;
    };
    // Every job of the batch inserted: ids ascend in payload order from the first.
    auto pushed_all = [&](const std::vector<int64_t>& ids, std::optional<TimestampTz> stored_at) {
        made_available(queue, priority, stored_at ? stored_at : run_at, ids.front(),
                       static_cast<int64_t>(n));
        conn.finish();
        return answer(ids);
    };

    bool any_concurrency_key = std::any_of(concurrency_keys.begin(), concurrency_keys.end(),
                                           [](const auto& k) { return k.has_value(); });
    if (batches::packable(static_cast<int64_t>(n), payload_bytes, any_key || any_concurrency_key,
                          run_at)) {
        batches::Push batch{queue,
                            run_at,
                            priority,
                            kind,
                            max_attempts,
                            PG_GETARG_DATUM(1),
                            static_cast<int64_t>(n)};
        // The packed insert reads the queue itself: only when it stored nothing (no such queue,
        // or one with limits) is the queue made, and the insert tried once more.
        std::optional<TimestampTz> stored_at;
        auto ids = batches::push(conn, batch, &stored_at);
        if (!ids) {
            queues::ensure(conn, queue);
            ids = batches::push(conn, batch, &stored_at);
        }
        if (ids) return pushed_all(*ids, stored_at);
    } else if (!queue_defaults::known(queue)) {
        // A queue this backend remembers exists (include/hopper/queue_defaults.hpp): asking
        // hopper.queues again would cost a statement per batch.
        queues::ensure(conn, queue);
    }

    // A batch without dedup keys goes in as COPY writes rows, if the table lets it (see
    // include/hopper/push_insert.hpp); the statement below does the rest.
    if (!any_key) {
        std::optional<int32_t> queue_max_attempts = queue_defaults::known(queue);
        if (!queue_max_attempts) queue_max_attempts = queue_defaults::look_up(conn, queue);
        if (queue_max_attempts) {
            std::vector<push::Job> jobs(n);
            for (size_t i = 0; i < n; ++i) {
                jobs[i].queue = queue;
                jobs[i].payload = payloads.values[i];
                jobs[i].run_at = run_at;
                jobs[i].priority = priority;
                jobs[i].kind = kind;
                jobs[i].concurrency_key = concurrency_keys[i];
            }
            if (auto ids = push::insert_direct(jobs, max_attempts.value_or(*queue_max_attempts)))
                return pushed_all(*ids, std::nullopt);
        }
    }

    // One statement for the whole batch. Ids ascend with the payload index; a dedup hit inserts
    // nothing for its slot. A batch without dedup keys cannot conflict and leaves out ON CONFLICT,
    // as a single push does. A keyed batch inserts its rows in key order (ids drawn in payload
    // order first): two batches with the same new keys in different orders would each wait for
    // the other's row of a key it has yet to reach, a deadlock.
#define HOPPER_BATCH_INSERT(id_column, id_value, rows, order, on_conflict)                       \
    "INSERT INTO hopper.jobs (" id_column                                                        \
    "queue, run_at, priority, max_attempts, created_at, "                                        \
    "kind, dedup_key, concurrency_key, payload) "                                                \
    "SELECT " id_value                                                                           \
    "q.name, COALESCE($2, pg_catalog.now()), $3, "                                               \
    "COALESCE($4, q.max_attempts), pg_catalog.now(), $5, u.dedup_key, u.concurrency_key, "       \
    "u.payload FROM hopper.queues q, " rows " WHERE q.name = $1 ORDER BY " order " " on_conflict \
    "RETURNING id, dedup_key, run_at::pg_catalog.timestamptz"
// The batch's slots, one row each, in payload order (ord).
#define HOPPER_BATCH_ROWS(alias)                                                 \
    "ROWS FROM (pg_catalog.unnest($6::jsonb[]), pg_catalog.unnest($7::text[]), " \
    "           pg_catalog.unnest($8::text[])) WITH ORDINALITY "                 \
    "  AS " alias "(payload, dedup_key, concurrency_key, ord)"
    static spi::Statement insert_keyed(
        HOPPER_BATCH_INSERT(
            "id, ", "u.id, ",
            "(SELECT pg_catalog.nextval('hopper.job_id_seq') AS id, r.* "
            "FROM " HOPPER_BATCH_ROWS("r") ") u",
            "u.dedup_key, u.ord",
            "ON CONFLICT (queue, dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING "),
        {TEXTOID, TIMESTAMPTZOID, INT2OID, INT4OID, TEXTOID, JSONBARRAYOID, TEXTARRAYOID,
         TEXTARRAYOID});
    static spi::Statement insert_unkeyed(
        HOPPER_BATCH_INSERT("", "", HOPPER_BATCH_ROWS("u"), "u.ord", ""),
        {TEXTOID, TIMESTAMPTZOID, INT2OID, INT4OID, TEXTOID, JSONBARRAYOID, TEXTARRAYOID,
         TEXTARRAYOID});
#undef HOPPER_BATCH_ROWS
#undef HOPPER_BATCH_INSERT

    // NULL rather than an array of NULLs when no job has a key.
    auto text_array = [](const std::vector<std::optional<std::string>>& keys) -> spi::Arg {
        bool any =
            std::any_of(keys.begin(), keys.end(), [](const auto& k) { return k.has_value(); });
        return any ? spi::arg_text_array(keys) : spi::null_arg();
    };

    spi::Result r = conn.exec(
        any_key ? insert_keyed : insert_unkeyed,
        {spi::arg_text(queue),
         run_at ? spi::arg_datum(TimestampTzGetDatum(*run_at)) : spi::null_arg(),
         spi::arg_datum(Int16GetDatum(priority)),
         max_attempts ? spi::arg_int4(*max_attempts) : spi::null_arg(), spi::arg_text(kind),
         spi::arg_datum(PG_GETARG_DATUM(1)), text_array(dedup_keys), text_array(concurrency_keys)});

    struct Inserted {
        int64_t id;
        std::optional<std::string> key;
    };
    // The run_at stored, which may differ from the one asked for (see insert_one).
    std::optional<TimestampTz> stored_at;
    if (!r.empty()) stored_at = r.get_timestamptz(0, 3);
    std::vector<Inserted> inserted;
    inserted.reserve(r.rows());
    for (uint64_t i = 0; i < r.rows(); ++i)
        inserted.push_back(
            {r.get_int64(i, 1), r.is_null(i, 2) ? std::nullopt : std::optional(r.get_text(i, 2))});
    std::sort(inserted.begin(), inserted.end(),
              [](const Inserted& a, const Inserted& b) { return a.id < b.id; });

    // Walk the slots in order: a slot without a key, or the first slot with a new key, took the
    // next inserted id; any other keyed slot is a duplicate of a job inserted earlier or in this
    // batch.
    std::vector<int64_t> ids(n, 0);
    std::unordered_map<std::string, int64_t> by_key;
    size_t next = 0;
    std::vector<size_t> unresolved;
    for (size_t i = 0; i < n; ++i) {
        const auto& key = dedup_keys[i];
        if (next < inserted.size() && inserted[next].key == key &&
            (!key || by_key.find(*key) == by_key.end())) {
            ids[i] = inserted[next++].id;
            if (key) by_key[*key] = ids[i];
        } else if (key && by_key.count(*key)) {
            ids[i] = by_key[*key];
        } else {
            unresolved.push_back(i);
        }
    }
    for (size_t i : unresolved) {
        const auto& key = dedup_keys[i];
        if (!key)  // an unkeyed slot always inserts
            throw PgError(ERRCODE_INTERNAL_ERROR, "hopper: a batch slot without a key was lost");
        if (auto known = by_key.find(*key); known != by_key.end()) {
            ids[i] = known->second;
            continue;
        }
        std::optional<int64_t> existing = find_unfinished(conn, queue, *key);
        if (!existing && window) existing = dedup::finished_within(conn, queue, *key, *window);
        // The job that held the key finished between the insert and the look. Inserting the
        // slot now, after rows of later keys, could deadlock with another keyed batch: the caller
        // retries the whole batch.
        if (!existing)
            throw PgError(ERRCODE_T_R_SERIALIZATION_FAILURE,
                          "could not push to queue \"" + queue +
                              "\": a deduplicated job finished during the push",
                          {}, "Retry the push.");
        ids[i] = *existing;
        by_key[*key] = *existing;
    }
    size_t kept = inserted.size();
    if (window) {
        std::vector<int64_t> keyed;
        for (const Inserted& row : inserted)
            if (row.key) keyed.push_back(row.id);
        std::unordered_map<int64_t, int64_t> original;
        for (const auto& [dup, first] : dedup::undo_duplicates(conn, queue, keyed, *window))
            original[dup] = first;
        for (int64_t& id : ids)
            if (auto it = original.find(id); it != original.end()) id = it->second;
        kept -= original.size();
        // An original pushed and finished since the snapshot: see dedup.hpp.
        if (IsolationUsesXactSnapshot()) {
            std::vector<std::optional<std::string>> kept_keys;
            for (const Inserted& row : inserted)
                if (row.key && original.find(row.id) == original.end())
                    kept_keys.push_back(row.key);
            dedup::refuse_unseen(conn, queue, kept_keys, *window);
        }
    }
    if (kept > 0) {
        // The batch's lowest key: one priority and run_at, ids ascending.
        made_available(queue, priority, stored_at, inserted.front().id, static_cast<int64_t>(kept));
    }
    conn.finish();
    return answer(ids);
}
