// Client: one prepared statement per queue function, typed in and out.
#include <stdexcept>
#include <utility>

#include "hopper/client.hpp"
#include "rows.hpp"

namespace hopper {

namespace {
Param opt_int(const std::optional<int>& v) {
    return v ? Param(std::to_string(*v)) : std::nullopt;
}
Param id_param(int64_t v) {
    return std::to_string(v);
}
}  // namespace

Client::Client(std::string conninfo) : conn_(std::move(conninfo)) {}

void Client::ensure_connected() {
    if (conn_.ok()) return;
    if (tx_depth_ > 0)
        throw ConnectionError("connection lost inside a transaction; roll it back and retry");
    conn_.reconnect();
}

void Client::reconnect() {
    if (tx_depth_ > 0)
        throw ConnectionError("cannot reconnect inside a transaction; roll it back first");
    conn_.reconnect();
}

int Client::client_encoding() {
    ensure_connected();
    return conn_.client_encoding();
}

Result Client::call(const char* name, const char* sql, const std::vector<Param>& params) {
    ensure_connected();
    return conn_.exec_prepared(name, sql, params);
}

Result Client::exec_params(const std::string& sql, const std::vector<Param>& params) {
    ensure_connected();
    return conn_.exec(sql, params);
}

bool Client::queue_create(const std::string& queue, const QueueOptions& o) {
    auto r = call("hopper_queue_create",
                  "SELECT hopper.queue_create($1, $2::int, " HOPPER_INTERVAL_PARAM("$3") ", "
                  HOPPER_INTERVAL_PARAM("$4") ", " HOPPER_INTERVAL_PARAM("$5") ", "
                  HOPPER_INTERVAL_PARAM("$6") ", $7::real)",
                  {queue, opt_int(o.max_attempts), rows::micros(o.lease),
                   rows::micros(o.backoff_base), rows::micros(o.backoff_cap),
                   rows::micros(o.retention),
                   o.jitter ? rows::real(*o.jitter) : std::nullopt});
    return r.boolean(0, 0);
}

bool Client::queue_drop(const std::string& queue) {
    return call("hopper_queue_drop", "SELECT hopper.queue_drop($1)", {queue}).boolean(0, 0);
}

void Client::queue_pause(const std::string& queue) {
    call("hopper_queue_pause", "SELECT hopper.queue_pause($1)", {queue});
}

void Client::queue_resume(const std::string& queue) {
    call("hopper_queue_resume", "SELECT hopper.queue_resume($1)", {queue});
}

int64_t Client::queue_purge(const std::string& queue) {
    return call("hopper_queue_purge", "SELECT hopper.queue_purge($1)", {queue}).int64(0, 0);
}

int64_t Client::push(const std::string& queue, const std::string& payload, const PushOptions& o) {
    auto r = call("hopper_push",
                  "SELECT hopper.queue_push($1, $2::jsonb, " HOPPER_TS_PARAM("$3") ", $4::int, "
                  "$5, $6::int, $7, $8, " HOPPER_INTERVAL_PARAM("$9") ")",
                  {queue, payload, rows::micros(o.run_at), std::to_string(o.priority), o.kind,
                   opt_int(o.max_attempts), o.dedup_key, o.concurrency_key,
                   rows::micros(o.dedup_window)});
    return r.int64(0, 0);
}

std::vector<int64_t> Client::push_batch(const std::string& queue,
                                        const std::vector<std::string>& payloads,
                                        const BatchPushOptions& o) {
    std::vector<std::optional<std::string>> p(payloads.begin(), payloads.end());
    const int enc = client_encoding();
    auto keys = [enc](const std::vector<std::optional<std::string>>& k) -> Param {
        if (k.empty()) return std::nullopt;
        return rows::array_literal(k, enc);
    };
    auto r = call("hopper_push_batch",
                  "SELECT * FROM hopper.queue_push_batch($1, $2::jsonb[], " HOPPER_TS_PARAM(
                      "$3") ", $4::int, $5, $6::int, $7::text[], "
                            "$8::text[], " HOPPER_INTERVAL_PARAM("$9") ")",
                  {queue, rows::array_literal(p, enc), rows::micros(o.run_at),
                   std::to_string(o.priority), o.kind, opt_int(o.max_attempts), keys(o.dedup_keys),
                   keys(o.concurrency_keys), rows::micros(o.dedup_window)});
    std::vector<int64_t> ids;
    ids.reserve(static_cast<size_t>(r.rows()));
    for (int i = 0; i < r.rows(); ++i) ids.push_back(r.int64(i, 0));
    return ids;
}

namespace {
constexpr const char* kPullName = "hopper_pull";
constexpr const char* kPullSql =
    "SELECT id, queue, kind, payload, attempt, lease_token, " HOPPER_US(
        "lease_until") ", " HOPPER_US("run_at") ", " HOPPER_US("created_at")
    ", " HOPPER_LEASE_LEFT("lease_until") " FROM hopper.queue_pull($1, $2::int, " HOPPER_INTERVAL_PARAM("$3")
    ", $4, $5::text[], " HOPPER_TS_PARAM("$6") ", $7::bool, " HOPPER_INTERVAL_PARAM("$8") ")";

std::vector<Param> pull_params(const std::string& queue, const PullOptions& o, int encoding) {
    return {queue,
            std::to_string(o.n),
            rows::micros(o.lease),
            o.worker,
            rows::kinds_param(o.kinds, encoding),
            rows::micros(o.at),
            detail::to_param(o.session_bound),
            rows::micros(o.wait)};
}

std::vector<Job> pulled_jobs(const Result& r) {
    std::vector<Job> jobs;
    jobs.reserve(static_cast<size_t>(r.rows()));
    for (int i = 0; i < r.rows(); ++i) jobs.push_back(rows::read_job(r, i));
    return jobs;
}
}  // namespace

std::vector<Job> Client::pull(const std::string& queue, const PullOptions& o) {
    return pulled_jobs(call(kPullName, kPullSql, pull_params(queue, o, client_encoding())));
}

void Client::begin_pull(const std::string& queue, const PullOptions& o) {
    ensure_connected();
    conn_.send_prepared(kPullName, kPullSql, pull_params(queue, o, conn_.client_encoding()));
    pull_cancelled_ = false;
    pull_sent_ = true;
}

bool Client::pull_ready() {
    if (!pull_sent_) throw std::logic_error("pull_ready: no pull was begun (call begin_pull)");
    return !conn_.busy();
}

std::vector<Job> Client::finish_pull() {
    if (!pull_sent_) throw std::logic_error("finish_pull: no pull was begun (call begin_pull)");
    pull_sent_ = false;
    bool cancelled = std::exchange(pull_cancelled_, false);
    try {
        return pulled_jobs(conn_.finish());
    } catch (const Error& e) {
        // Cancelled: the wait was cut (57014), or the statement, dropped by DEALLOCATE or
        // DISCARD ALL, never ran and was not sent again (26000). Either way nothing was claimed.
        if (cancelled && (e.sqlstate() == sqlstate::kQueryCanceled || e.sqlstate() == "26000"))
            return {};
        throw;
    }
}

void Client::cancel_pull() {
    pull_cancelled_ = conn_.cancel();
}

std::vector<Job> Client::take(const std::string& queue, const TakeOptions& o) {
    Param kinds = rows::kinds_param(o.kinds, client_encoding());
    auto r = call("hopper_take",
                  "SELECT id, queue, kind, payload, attempt, " HOPPER_US("run_at") ", " HOPPER_US(
                      "created_at") " FROM hopper.queue_take($1, $2::int, $3, $4::text[], "
                  HOPPER_TS_PARAM("$5") ", " HOPPER_INTERVAL_PARAM("$6") ")",
                  {queue, std::to_string(o.n), o.worker, kinds, rows::micros(o.at),
                   rows::micros(o.wait)});
    std::vector<Job> jobs;
    jobs.reserve(static_cast<size_t>(r.rows()));
    for (int i = 0; i < r.rows(); ++i) jobs.push_back(rows::read_taken_job(r, i));
    return jobs;
}

bool Client::complete(int64_t id, int64_t token, const std::optional<std::string>& result) {
    return call("hopper_complete", "SELECT hopper.queue_complete($1::int8, $2::int8, $3::jsonb)",
                {id_param(id), id_param(token), result})
        .boolean(0, 0);
}

namespace {
// The three array parameters of queue_complete_many.
std::vector<Param> completion_params(const std::vector<int64_t>& ids,
                                     const std::vector<int64_t>& tokens,
                                     const std::vector<std::optional<std::string>>& results,
                                     int encoding) {
    if (ids.size() != tokens.size() || (!results.empty() && results.size() != ids.size()))
        throw std::invalid_argument(
            "complete_many: ids, lease_tokens and results differ in length");
    std::vector<std::optional<std::string>> id_text, token_text;
    for (int64_t v : ids) id_text.push_back(std::to_string(v));
    for (int64_t v : tokens) token_text.push_back(std::to_string(v));
    return {rows::array_literal(id_text, encoding), rows::array_literal(token_text, encoding),
            results.empty() ? Param() : Param(rows::array_literal(results, encoding))};
}

// "{1,2,3}" (a bigint[] as text) into numbers; NULL or "{}" into none.
std::vector<int64_t> parse_int_array(std::string_view text) {
    std::vector<int64_t> out;
    int64_t v = 0;
    bool in_number = false;
    for (char ch : text) {
        if (ch >= '0' && ch <= '9') {
            v = v * 10 + (ch - '0');
            in_number = true;
        } else if (in_number) {
            out.push_back(v);
            v = 0;
            in_number = false;
        }
    }
    if (in_number) out.push_back(v);
    return out;
}
}  // namespace

std::vector<int64_t> Client::complete_many(const std::vector<int64_t>& ids,
                                           const std::vector<int64_t>& tokens,
                                           const std::vector<std::optional<std::string>>& results) {
    auto r = call("hopper_complete_many",
                  "SELECT * FROM hopper.queue_complete_many($1::int8[], $2::int8[], $3::jsonb[])",
                  completion_params(ids, tokens, results, client_encoding()));
    std::vector<int64_t> done;
    done.reserve(static_cast<size_t>(r.rows()));
    for (int i = 0; i < r.rows(); ++i) done.push_back(r.int64(i, 0));
    return done;
}

std::vector<Job> Client::complete_many_and_pull(
    const std::vector<int64_t>& ids, const std::vector<int64_t>& tokens,
    const std::vector<std::optional<std::string>>& results, const std::string& queue,
    const PullOptions& o, std::vector<int64_t>& completed) {
    const int enc = client_encoding();
    std::vector<Param> params = completion_params(ids, tokens, results, enc);
    Param kinds = rows::kinds_param(o.kinds, enc);
    for (Param p : {Param(queue), Param(std::to_string(o.n)), rows::micros(o.lease),
                    Param(o.worker), kinds, rows::micros(o.at), detail::to_param(o.session_bound)})
        params.push_back(std::move(p));
    // The pull refers to the completions' row, so it runs after them; one row even when it
    // claims nothing, to carry the completed ids.
    auto r = call(
        "hopper_complete_many_and_pull",
        "SELECT j.id, j.queue, j.kind, j.payload, j.attempt, j.lease_token, " HOPPER_US(
            "j.lease_until") ", " HOPPER_US("j.run_at") ", " HOPPER_US("j.created_at")
        ", " HOPPER_LEASE_LEFT("j.lease_until") ", done.ids::text FROM (SELECT pg_catalog.array_agg(d.id) AS ids"
        " FROM hopper.queue_complete_many($1::int8[], $2::int8[], $3::jsonb[]) AS d(id)) done"
        " LEFT JOIN LATERAL hopper.queue_pull($4, $5::int + 0 * COALESCE(pg_catalog.cardinality("
        "done.ids), 0), " HOPPER_INTERVAL_PARAM("$6") ", $7, $8::text[], " HOPPER_TS_PARAM("$9")
        ", $10::bool) j ON true",
        params);
    completed = r.rows() > 0 ? parse_int_array(r.text(0, 10)) : std::vector<int64_t>{};
    std::vector<Job> jobs;
    for (int i = 0; i < r.rows(); ++i)
        if (!r.is_null(i, 0)) jobs.push_back(rows::read_job(r, i));
    return jobs;
}

std::optional<JobState> Client::fail(int64_t id, int64_t token, const std::string& error,
                                     const FailOptions& o) {
    auto r = call("hopper_fail",
                  "SELECT hopper.queue_fail($1::int8, $2::int8, $3, " HOPPER_INTERVAL_PARAM(
                      "$4") ", $5::bool)",
                  {id_param(id), id_param(token), error, rows::micros(o.retry_in),
                   detail::to_param(o.permanent)});
    if (r.is_null(0, 0)) return std::nullopt;
    return parse_job_state(r.text(0, 0));
}

std::optional<JobState> Client::fail_taken(int64_t id, const std::string& error,
                                           const FailOptions& o,
                                           const std::optional<std::string>& worker) {
    auto r = call(
        "hopper_fail_taken",
        "SELECT hopper.queue_fail_taken($1::int8, $2, " HOPPER_INTERVAL_PARAM(
            "$3") ", $4::bool, $5)",
        {id_param(id), error, rows::micros(o.retry_in), detail::to_param(o.permanent), worker});
    if (r.is_null(0, 0)) return std::nullopt;
    return parse_job_state(r.text(0, 0));
}

bool Client::heartbeat(int64_t id, int64_t token, std::optional<Duration> extend) {
    return call(
               "hopper_heartbeat",
               "SELECT hopper.queue_heartbeat($1::int8, $2::int8, " HOPPER_INTERVAL_PARAM("$3") ")",
               {id_param(id), id_param(token), rows::micros(extend)})
        .boolean(0, 0);
}

bool Client::progress(int64_t id, int64_t token, double fraction,
                      const std::optional<std::string>& detail) {
    // The server keeps progress as a real (rows::real: 1e-50 is stored as 0).
    return call("hopper_progress",
                "SELECT hopper.queue_progress($1::int8, $2::int8, $3::real, $4::jsonb)",
                {id_param(id), id_param(token), rows::real(fraction), detail})
        .boolean(0, 0);
}

bool Client::release(int64_t id, int64_t token) {
    return call("hopper_release", "SELECT hopper.queue_release($1::int8, $2::int8)",
                {id_param(id), id_param(token)})
        .boolean(0, 0);
}

bool Client::cancel(int64_t id) {
    return call("hopper_cancel", "SELECT hopper.queue_cancel($1::int8)", {id_param(id)})
        .boolean(0, 0);
}

bool Client::retry(int64_t id) {
    return call("hopper_retry", "SELECT hopper.queue_retry($1::int8)", {id_param(id)})
        .boolean(0, 0);
}

JobInfo Client::job_status(int64_t id) {
    auto r =
        call("hopper_job_status",
             "SELECT " HOPPER_JOB_INFO_COLUMNS " FROM hopper.job_status($1::int8)", {id_param(id)});
    return rows::read_job_info(r, 0);
}

std::vector<QueueStat> Client::stats(const std::optional<std::string>& queue) {
    auto r =
        call("hopper_stats",
             "SELECT queue, available, scheduled, running, completed, dead, cancelled, " HOPPER_US(
                 "oldest_available_age") ", paused FROM hopper.queue_stats($1)",
             {queue});
    std::vector<QueueStat> out;
    for (int i = 0; i < r.rows(); ++i) out.push_back(rows::read_queue_stat(r, i));
    return out;
}

std::vector<JobInfo> Client::jobs(const std::string& queue, std::optional<JobState> state,
                                  int limit) {
    Param st;
    if (state) st = std::string(to_string(*state));
    auto r = call("hopper_jobs",
                  "SELECT " HOPPER_JOB_INFO_COLUMNS " FROM hopper.queue_jobs($1, $2, $3::int)",
                  {queue, st, std::to_string(limit)});
    std::vector<JobInfo> out;
    for (int i = 0; i < r.rows(); ++i) out.push_back(rows::read_job_info(r, i));
    return out;
}

}  // namespace hopper
