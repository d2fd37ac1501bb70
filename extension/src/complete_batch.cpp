// Workers, fewer round trips and commits per job:
//  - queue_complete_many completes many held jobs in one statement (one commit for the batch);
//  - queue_complete_pull completes the job a worker holds and claims its next jobs in the same call
//    (one round trip and one commit per job for a worker that pulls one at a time).
// Both fence by lease token exactly as queue_complete does: a stale token completes nothing.
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "hopper/args.hpp"
#include "hopper/direct_complete.hpp"
#include "hopper/jobs.hpp"
#include "hopper/notify.hpp"
#include "hopper/result.hpp"
#include "hopper/sql.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/lsyscache.h"

// The single-job entry points, reused as they are so the semantics cannot drift apart.
Datum hopper_queue_complete(PG_FUNCTION_ARGS);
Datum hopper_queue_pull(PG_FUNCTION_ARGS);
}

using namespace hopper;

namespace {

// Most jobs one queue_complete_many call may complete.
constexpr size_t kMaxCompleteMany = 10000;

struct Int8Array {
    std::vector<int64_t> values;
};

// A one-dimensional bigint[] without NULL elements.
Int8Array int8_array(FunctionCallInfo fcinfo, int n, const char* argname) {
    if (args::is_null(fcinfo, n))
        throw PgError(ERRCODE_NULL_VALUE_NOT_ALLOWED, std::string(argname) + " must not be NULL");
    Datum d = PG_GETARG_DATUM(n);
    Datum* elems = nullptr;
    bool* nulls = nullptr;
    int count = 0;
    int ndim = pg_guard([&] {
        ArrayType* arr = DatumGetArrayTypeP(d);
        int dims = ARR_NDIM(arr);
        if (dims <= 1)
            deconstruct_array(arr, INT8OID, 8, true, TYPALIGN_DOUBLE, &elems, &nulls, &count);
        return dims;
    });
    if (ndim > 1)
        throw PgError(ERRCODE_ARRAY_SUBSCRIPT_ERROR,
                      std::string(argname) + " must be a one-dimensional array");
    Int8Array out;
    out.values.reserve(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
        if (nulls[i])
            throw PgError(
                ERRCODE_NULL_VALUE_NOT_ALLOWED,
                std::string(argname) + "[" + std::to_string(i + 1) + "] must not be NULL");
        out.values.push_back(DatumGetInt64(elems[i]));
    }
    return out;
}

// The number of elements of a one-dimensional array of any type (NULL elements allowed).
size_t array_length(FunctionCallInfo fcinfo, int n, const char* argname) {
    Datum d = PG_GETARG_DATUM(n);
    int ndim = 0;
    int count = pg_guard([&] {
        ArrayType* arr = DatumGetArrayTypeP(d);
        ndim = ARR_NDIM(arr);
        return ndim == 0 ? 0 : ArrayGetNItems(ndim, ARR_DIMS(arr));
    });
    if (ndim > 1)
        throw PgError(ERRCODE_ARRAY_SUBSCRIPT_ERROR,
                      std::string(argname) + " must be a one-dimensional array");
    return static_cast<size_t>(count);
}

// Calls another hopper entry point with arguments first..first+nargs-1 of fcinfo, sharing the
// caller's result set when set_result. A PostgreSQL error inside it comes back as a PgError.
Datum forward(PGFunction fn, FunctionCallInfo fcinfo, int first, int nargs, bool set_result,
              bool* isnull) {
    return pg_guard([&] {
        auto sub = static_cast<FunctionCallInfo>(palloc0(SizeForFunctionCallInfo(nargs)));
        InitFunctionCallInfoData(*sub, fcinfo->flinfo, nargs, fcinfo->fncollation, nullptr,
                                 set_result ? fcinfo->resultinfo : nullptr);
        for (int i = 0; i < nargs; ++i) {
            bool present = first + i < PG_NARGS();
            sub->args[i].value = present ? fcinfo->args[first + i].value : (Datum)0;
            sub->args[i].isnull = present ? fcinfo->args[first + i].isnull : true;
        }
        Datum d = fn(sub);
        *isnull = sub->isnull;
        pfree(sub);
        return d;
    });
}

// Completes the held jobs given as arguments 0-2 of fcinfo (ids, lease_tokens, results) and
// returns the ids completed, in the order given, each once. An id whose lease was lost is left
// out; an id that never existed raises P0002, as queue_complete does.
std::vector<int64_t> complete_held(FunctionCallInfo fcinfo) {
    Int8Array ids = int8_array(fcinfo, 0, "ids");
    Int8Array tokens = int8_array(fcinfo, 1, "lease_tokens");
    size_t n = ids.values.size();
    if (tokens.values.size() != n)
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                      "lease_tokens has " + std::to_string(tokens.values.size()) +
                          " elements but ids has " + std::to_string(n),
                      {}, "Pass one lease token per id, in the same order.");
    bool results_null = args::is_null(fcinfo, 2);
    if (!results_null) {
        size_t nr = array_length(fcinfo, 2, "results");
        if (nr != n)
            throw PgError(
                ERRCODE_INVALID_PARAMETER_VALUE,
                "results has " + std::to_string(nr) + " elements but ids has " + std::to_string(n),
                {}, "Pass one result (or NULL) per id, or NULL for no results.");
    }
    if (n > kMaxCompleteMany)
        throw PgError(ERRCODE_INVALID_PARAMETER_VALUE,
                      "ids has " + std::to_string(n) + " elements; one call completes at most " +
                          std::to_string(kMaxCompleteMany),
                      {}, "Complete in several calls.");

    std::vector<int64_t> completed;
    if (n == 0) return completed;

        // One statement for the batch. "held" keeps the (id, token) pairs that still hold their
        // lease, each checked by a primary-key lookup (OFFSET 0 keeps it a per-id lookup: estimated
        // on statistics that usually say few jobs run, a join would scan the table or loop n x n).
        // The DELETE then takes those ids by primary key and re-checks the token (a concurrent
        // rescue gives the job a new token, and tokens are unique, so a set test is the pair test);
        // the result of each job comes from its own pair.
#define HOPPER_HELD_CTE                                                                        \
    "WITH held AS MATERIALIZED (SELECT DISTINCT ON (u.id) u.id, u.token, u.result "            \
    "  FROM ROWS FROM (pg_catalog.unnest($1::bigint[]), pg_catalog.unnest($2::bigint[]), "     \
    "                  pg_catalog.unnest($3::jsonb[])) AS u(id, token, result), "              \
    "  LATERAL (SELECT 1 FROM hopper.jobs jj WHERE jj.id = u.id AND jj.lease_token = u.token " \
    "           AND jj.state OPERATOR(pg_catalog.=) 'running' OFFSET 0) x ORDER BY u.id), "    \
    "done AS (DELETE FROM hopper.jobs j WHERE j.id = ANY (ARRAY(SELECT id FROM held)) "        \
    "  AND j.lease_token = ANY (ARRAY(SELECT token FROM held)) "                               \
    "    AND j.state OPERATOR(pg_catalog.=) 'running' "                                        \
    "  RETURNING j.*), "
    static spi::Statement without_results(
        HOPPER_HELD_CTE "kept AS (" HOPPER_HISTORY_INSERT HOPPER_HISTORY_SELECT("d")
        "1.0::real, d.last_error, d.errors, d.progress_detail, d.payload, 'completed', "
        HOPPER_FINISHED_AT("d", "pg_catalog.now()") ", NULL FROM done d WHERE " HOPPER_QUEUE_KEEPS_HISTORY("d") ") "
        "SELECT d.id, d.queue, " HOPPER_QUEUE_NOTIFIES_DONE("d") ", " HOPPER_QUEUE_LIMITED("d") " FROM done d",
        {INT8ARRAYOID, INT8ARRAYOID, JSONBARRAYOID}, spi::Planning::kWalkIndexes);
    static spi::Statement with_results(
        HOPPER_HELD_CTE "kept AS (" HOPPER_HISTORY_INSERT HOPPER_HISTORY_SELECT("d")
        "1.0::real, d.last_error, d.errors, d.progress_detail, d.payload, 'completed', "
        HOPPER_FINISHED_AT("d", "pg_catalog.now()") ", h.result FROM done d JOIN held h ON h.id = d.id WHERE "
        HOPPER_QUEUE_KEEPS_HISTORY("d") ") "
        "SELECT d.id, d.queue, " HOPPER_QUEUE_NOTIFIES_DONE("d") ", " HOPPER_QUEUE_LIMITED("d") " FROM done d",
        {INT8ARRAYOID, INT8ARRAYOID, JSONBARRAYOID}, spi::Planning::kWalkIndexes);
#undef HOPPER_HELD_CTE
    struct Done {
        std::string queue;
        bool notify;
        bool limited;  // its queue has limits: the job's slot comes free
    };
    std::unordered_map<int64_t, Done> done;
    done.reserve(n);
    spi::Connection conn;
    // Straight through the access methods when it can (include/hopper/direct_complete.hpp).
    std::vector<direct_complete::Item> items(n);
    std::vector<Datum> results(n);
    std::vector<char> result_nulls(n, 1);
    if (!results_null) {
        Datum d = PG_GETARG_DATUM(2);
        pg_guard([&] {
            Datum* elems;
            bool* nulls;
            int count;
            deconstruct_array(DatumGetArrayTypeP(d), JSONBOID, -1, false, TYPALIGN_INT, &elems,
                              &nulls, &count);
            for (int i = 0; i < count && static_cast<size_t>(i) < n; ++i) {
                results[i] = elems[i];
                result_nulls[i] = nulls[i];
            }
        });
    }
    for (size_t i = 0; i < n; ++i)
        items[i] = {ids.values[i], tokens.values[i], results[i], result_nulls[i] != 0};
    if (auto direct = direct_complete::complete(items)) {
        for (size_t i = 0; i < n; ++i)
            if ((*direct)[i].done)
                done.emplace(ids.values[i], Done{(*direct)[i].queue, (*direct)[i].notify_done,
                                                 (*direct)[i].limited});
    } else {
        spi::Result r =
            conn.exec(results_null ? without_results : with_results,
                      {spi::arg_datum(PG_GETARG_DATUM(0)), spi::arg_datum(PG_GETARG_DATUM(1)),
                       spi::arg_datum(results_null ? (Datum)0 : PG_GETARG_DATUM(2), results_null)});
        for (uint64_t i = 0; i < r.rows(); ++i)
            done.emplace(r.get_int64(i, 1),
                         Done{r.get_text(i, 2), r.get_bool(i, 3), r.get_bool(i, 4)});
    }

    std::unordered_set<int64_t> distinct(ids.values.begin(), ids.values.end());
    if (done.size() < distinct.size()) {
        // Some lease was lost, which is normal news; an id that never existed is a caller's bug.
        static spi::Statement unknown(
            "SELECT u.id FROM pg_catalog.unnest($1::bigint[]) AS u(id) "
            "WHERE NOT EXISTS (SELECT 1 FROM hopper.jobs j WHERE j.id = u.id) "
            "  AND NOT EXISTS (SELECT 1 FROM hopper.job_history h WHERE h.id = u.id) "
            "  AND NOT " HOPPER_MAY_BE_UNKEPT("u.id") " LIMIT 1",
            {INT8ARRAYOID}, spi::Planning::kWalkIndexes);
        spi::Result u = conn.exec(unknown, {spi::arg_datum(PG_GETARG_DATUM(0))});
        if (!u.empty()) throw jobs::unknown_job(u.get_int64(0, 1), jobs::Issued::no);
    }

    std::unordered_set<int64_t> emitted;
    for (int64_t id : ids.values) {
        auto it = done.find(id);
        if (it == done.end() || !emitted.insert(id).second) continue;
        notify::job_done(id, it->second.queue, "completed", it->second.notify);
        if (it->second.limited) notify::slot_freed(it->second.queue);
        completed.push_back(id);
    }
    conn.finish();
    return completed;
}

}  // namespace

// queue_complete_many(ids bigint[], lease_tokens bigint[], results jsonb[] = NULL) -> setof bigint:
// the ids that were completed, in the order given (see complete_held).
HOPPER_FUNCTION(hopper_queue_complete_many) {
    result::SetResult out(fcinfo);
    for (int64_t id : complete_held(fcinfo)) {
        Datum v = Int64GetDatum(id);
        bool isnull = false;
        out.add_values(&v, &isnull);
    }
    return (Datum)0;
}

// queue_complete_pull(id, lease_token, result, queue, n, lease, worker, kinds, at, session_bound)
// -> setof hopper.leased_job: completes the held job exactly as queue_complete would (a lost lease
// completes nothing), then pulls exactly as queue_pull would, all in the caller's transaction. With
// id and lease_token both NULL it only pulls, so a worker loop can start with it.
HOPPER_FUNCTION(hopper_queue_complete_pull) {
    bool id_null = args::is_null(fcinfo, 0);
    bool token_null = args::is_null(fcinfo, 1);
    if (id_null != token_null)
        throw PgError(ERRCODE_NULL_VALUE_NOT_ALLOWED,
                      std::string(id_null ? "id" : "lease_token") + " must not be NULL when " +
                          (id_null ? "lease_token" : "id") + " is given",
                      {}, "Pass both to complete a job before pulling, or neither to only pull.");
    // Check the queue before completing anything, so a typo does not complete and then fail.
    args::queue_name(fcinfo, 3);
    if (!id_null) {
        bool isnull = false;
        forward(hopper_queue_complete, fcinfo, 0, 3, false, &isnull);
    }
    bool isnull = false;
    return forward(hopper_queue_pull, fcinfo, 3, 7, true, &isnull);
}

// queue_complete_many_pull(ids, lease_tokens, results, queue, n, lease, worker, kinds, at,
// session_bound) -> setof hopper.leased_job: completes the held jobs exactly as queue_complete_many
// would (lost leases complete nothing), then pulls exactly as queue_pull would, all in the
// caller's transaction: one round trip and one commit per batch for a worker that pulls n at a
// time. Empty arrays only pull.
HOPPER_FUNCTION(hopper_queue_complete_many_pull) {
    // Check the queue before completing anything, so a typo does not complete and then fail.
    args::queue_name(fcinfo, 3);
    (void)complete_held(fcinfo);
    bool isnull = false;
    return forward(hopper_queue_pull, fcinfo, 3, 7, true, &isnull);
}
