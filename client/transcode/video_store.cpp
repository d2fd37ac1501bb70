// transcode.videos: DDL and the row's transitions pending -> processing -> processed | failed.
#include "video_store.hpp"

#include <regex>
#include <string_view>
#include <stdexcept>

#include <fmt/format.h>
#include <hopper/json.hpp>
#include <hopper/utf8.hpp>

namespace transcode {

// hopper.job_state is compared as text and a job id is cast to text before ||: pg_catalog has no
// operator for those exact types, and one created in a schema on the worker's search_path would
// be chosen over it, and run as the worker's role.

namespace {

// One statement each: parameterised execution takes a single statement at a time.
constexpr const char* kSchemaSql[] = {
    "CREATE SCHEMA IF NOT EXISTS transcode",
    R"sql(
CREATE TABLE IF NOT EXISTS transcode.videos (
    id text PRIMARY KEY DEFAULT pg_catalog.gen_random_uuid()::text
        CHECK (id ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$'),
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    updated_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    raw_file_path text NOT NULL,
    processed_file_path text,
    processing_status text NOT NULL DEFAULT 'pending'
        CHECK (processing_status IN ('pending', 'processing', 'processed', 'failed')),
    duration double precision,
    width integer,
    height integer,
    renditions jsonb,
    error text,
    job_id bigint
)
)sql",
    "CREATE INDEX IF NOT EXISTS videos_job_id_idx ON transcode.videos (job_id)",
};

}  // namespace

void ensure_schema(hopper::Client& client) {
    // Without the extension a worker would wait for jobs forever and a submit would leave a row
    // behind: refuse first, as the hopper command does.
    auto extension = client.exec(
        "SELECT 1 FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) "
        "'hopper'");
    if (extension.rows() == 0)
        throw std::runtime_error(
            "the database has no hopper extension: CREATE EXTENSION hopper there first");
    // Readers (status) may lack the right to create anything: only create what is missing.
    auto exists = client.exec("SELECT pg_catalog.to_regclass('transcode.videos') IS NOT NULL");
    if (exists.boolean(0, 0)) return;
    // CREATE ... IF NOT EXISTS still races with itself (duplicate pg_type rows): serialise.
    hopper::Transaction tx(client);
    client.exec("SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('transcode.videos'))");
    for (const char* sql : kSchemaSql) client.exec(sql);
    tx.commit();
}

bool valid_video_id(const std::string& id) {
    static const std::regex re("^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$");
    return std::regex_match(id, re);
}

void require_video_id(const std::string& id) {
    if (!valid_video_id(id))
        throw std::invalid_argument(fmt::format(
            "invalid video id \"{}\": use 1-128 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit",
            hopper::escaped_utf8(id)));
}

Submitted submit_video(hopper::Client& client, const std::string& queue,
                       const std::optional<std::string>& id, const std::string& raw_path,
                       std::optional<int> max_attempts) {
    if (id) require_video_id(*id);
    hopper::Transaction tx(client);
    // A row whose job ended unseen is failed, and so may be submitted again.
    if (id) settle_ended_jobs(client, id);
    auto row = client.exec(
        "INSERT INTO transcode.videos AS v (id, raw_file_path) "
        "VALUES (COALESCE($1, pg_catalog.gen_random_uuid()::text), $2) "
        "ON CONFLICT (id) DO UPDATE SET raw_file_path = EXCLUDED.raw_file_path, "
        "  processing_status = 'pending', processed_file_path = NULL, duration = NULL, "
        "  width = NULL, height = NULL, renditions = NULL, error = NULL, "
        "  updated_at = pg_catalog.now() "
        "  WHERE v.processing_status = 'failed' "
        "RETURNING v.id",
        id, raw_path);
    if (row.rows() == 0) {
        auto existing =
            client.exec("SELECT processing_status FROM transcode.videos WHERE id = $1", id);
        throw std::runtime_error(
            fmt::format("video {} already exists ({}); only a failed video can be submitted again",
                        *id, existing.rows() ? std::string(existing.text(0, 0)) : "unknown"));
    }
    Submitted s;
    s.video_id = std::string(row.text(0, 0));
    hopper::PushOptions po;
    po.kind = kJobKind;
    po.max_attempts = max_attempts;
    po.concurrency_key = "video:" + s.video_id;
    // Quoted in the session's encoding, which the server converts from (in SJIS a character may
    // end in the byte of a backslash).
    const int enc = client.connection().client_encoding();
    s.job_id = client.push(
        queue,
        fmt::format(R"({{"video_id": {}, "path": {}}})", hopper::json::quote(s.video_id, enc),
                    hopper::json::quote(raw_path, enc)),
        po);
    client.exec("UPDATE transcode.videos SET job_id = $2 WHERE id = $1", s.video_id, s.job_id);
    tx.commit();
    return s;
}

// A row's stamp (RowStamp): updated_at in whole microseconds, which reads back exactly whatever
// the session's DateStyle and TimeZone.
#define TRANSCODE_STAMP "(EXTRACT(epoch FROM updated_at) * 1000000::numeric)::int8"

std::optional<RowStamp> claim_video(hopper::Client& client, const std::string& video_id,
                                    int64_t job_id) {
    auto r = client.exec(
        "UPDATE transcode.videos SET processing_status = 'processing', error = NULL, "
        "  updated_at = pg_catalog.now() "
        "WHERE id = $1 AND job_id = $2 AND processing_status IN ('pending', 'processing', "
        "'failed') RETURNING " TRANSCODE_STAMP "::text",
        video_id, job_id);
    if (r.rows() != 1) return std::nullopt;
    return std::string(r.text(0, 0));
}

bool job_gone(hopper::Client& client, int64_t job_id) {
    // The savepoint's name is ours alone; nothing else in the transcoder nests one.
    const bool in_tx = client.connection().in_transaction();
    if (in_tx) client.exec("SAVEPOINT transcode_job_gone");
    try {
        client.job_status(job_id);
    } catch (const hopper::Error& e) {
        if (in_tx && e.sqlstate() != "08006")
            client.exec("ROLLBACK TO SAVEPOINT transcode_job_gone");
        if (e.sqlstate() != hopper::sqlstate::kNoData) throw;
        return true;
    }
    if (in_tx) client.exec("RELEASE SAVEPOINT transcode_job_gone");
    return false;
}

namespace {
constexpr const char* kUnkeptEnd =
    " ended with no worker finishing it, and its queue keeps no history to say how: cancelled, "
    "or dead after its last attempt";
}  // namespace

std::string unkept_end_error(int64_t job_id) {
    return fmt::format("job {}{}", job_id, kUnkeptEnd);
}

std::optional<std::string> mark_ended_unkept(hopper::Client& client, const std::string& video_id,
                                             int64_t job_id, const std::optional<RowStamp>& stamp,
                                             bool cancel_only_end) {
    // Column references in SET read the row as it was before the update.
    auto r = client.exec(
        "UPDATE transcode.videos SET processing_status = 'failed', "
        "  error = CASE WHEN $3 AND (processing_status = 'failed' "
        "    OR " TRANSCODE_STAMP
        " = $4::int8) THEN 'cancelled' ELSE $5 END, "
        "  updated_at = pg_catalog.now() "
        "WHERE id = $1 AND job_id = $2 AND (processing_status IN ('pending', 'processing') "
        "  OR ($3 AND processing_status = 'failed' AND error = $5)) "
        "RETURNING error",
        video_id, job_id, cancel_only_end, stamp, unkept_end_error(job_id));
    if (r.rows() != 1) return std::nullopt;
    return std::string(r.text(0, 0));
}

std::vector<std::string> settle_ended_jobs(hopper::Client& client,
                                           const std::optional<std::string>& video_id) {
    // Only a row not touched since the job ended: a job retried and claimed again since (which
    // takes its history row away) must keep the row its new attempt set.
    auto r = client.exec(
        "UPDATE transcode.videos v SET processing_status = 'failed', "
        "  error = CASE h.state::text WHEN 'cancelled' THEN 'cancelled' "
        "    ELSE COALESCE(h.last_error, 'job ' || h.id::text || ' is dead') END, "
        "  updated_at = pg_catalog.now() "
        "FROM hopper.job_history h "
        "WHERE h.id = v.job_id AND h.state::text IN ('dead', 'cancelled') "
        "  AND v.processing_status IN ('pending', 'processing') "
        "  AND v.updated_at <= h.finished_at AND ($1::text IS NULL OR v.id = $1) "
        "RETURNING v.id",
        video_id);
    std::vector<std::string> ids;
    for (int i = 0; i < r.rows(); ++i) ids.emplace_back(r.text(i, 0));
    // A queue that keeps no history (retention 0) forgets a job as it ends. A processing row's job
    // was pulled, so it was in hopper.jobs; from there it only leaves for history or, ended in such
    // a queue, for nowhere: found in neither (one snapshot), it has ended. Such a row was left
    // processing for good, and refused a second submit.
    r = client.exec(
        "UPDATE transcode.videos v SET processing_status = 'failed', "
        "  error = 'job ' || v.job_id::text || $2, updated_at = pg_catalog.now() "
        "WHERE v.processing_status = 'processing' AND v.job_id IS NOT NULL "
        "  AND ($1::text IS NULL OR v.id = $1) "
        "  AND NOT EXISTS (SELECT 1 FROM hopper.jobs j WHERE j.id = v.job_id) "
        "  AND NOT EXISTS (SELECT 1 FROM hopper.job_history h WHERE h.id = v.job_id) "
        "RETURNING v.id",
        video_id, kUnkeptEnd);
    for (int i = 0; i < r.rows(); ++i) ids.emplace_back(r.text(i, 0));
    // A pending row's job may also wait in a packed row (queue_push_batch): job_status, which
    // looks there too, decides. Ended, it never comes back, so the update needs no second look.
    auto pending = client.exec(
        "SELECT v.id, v.job_id FROM transcode.videos v "
        "WHERE v.processing_status = 'pending' AND v.job_id IS NOT NULL "
        "  AND ($1::text IS NULL OR v.id = $1) "
        "  AND NOT EXISTS (SELECT 1 FROM hopper.jobs j WHERE j.id = v.job_id) "
        "  AND NOT EXISTS (SELECT 1 FROM hopper.job_history h WHERE h.id = v.job_id)",
        video_id);
    for (int i = 0; i < pending.rows(); ++i) {
        std::string id(pending.text(i, 0));
        int64_t job_id = pending.int64(i, 1);
        if (!job_gone(client, job_id)) continue;
        auto u = client.exec(
            "UPDATE transcode.videos SET processing_status = 'failed', error = $3, "
            "  updated_at = pg_catalog.now() "
            "WHERE id = $1 AND job_id = $2 AND processing_status = 'pending'",
            id, job_id, unkept_end_error(job_id));
        if (u.affected_rows() == 1) ids.push_back(id);
    }
    return ids;
}

std::vector<std::string> videos_not_processing(hopper::Client& client,
                                               const std::vector<std::string>& video_ids) {
    std::vector<std::string> out;
    if (video_ids.empty()) return out;
    std::string ids = "[";
    for (const auto& id : video_ids) {
        if (ids.size() > 1) ids += ", ";
        ids += hopper::json::quote(id);
    }
    ids += "]";
    auto r = client.exec(
        "SELECT v.id FROM transcode.videos v "
        "WHERE v.id IN (SELECT pg_catalog.jsonb_array_elements_text($1::jsonb)) "
        "  AND v.processing_status <> 'processing'",
        ids);
    for (int i = 0; i < r.rows(); ++i) out.emplace_back(r.text(i, 0));
    return out;
}

namespace {
// The condition of a row update made while the job runs: the job is still running under our
// lease. A worker whose lease ran out (stalled, cut off) goes on until its next heartbeat says so;
// by then the job may run again under another worker, which owns the video row, and a late write
// would overwrite that worker's. FOR SHARE waits for a takeover in flight and then sees its token,
// where a plain read could still see ours.
constexpr const char* kStillOurs =
    " AND EXISTS (SELECT 1 FROM hopper.jobs j WHERE j.id = $2 AND j.lease_token = $3 "
    "AND j.state::text = 'running' FOR SHARE)";
}  // namespace

std::optional<RowStamp> record_probe(hopper::Client& client, const std::string& video_id,
                                     int64_t job_id, int64_t lease_token, const MediaInfo& info) {
    auto r = client.exec(
        std::string("UPDATE transcode.videos SET duration = $4, width = $5, height = $6, "
                    "  updated_at = pg_catalog.now() WHERE id = $1 AND job_id = $2") +
            kStillOurs + " RETURNING " TRANSCODE_STAMP "::text",
        video_id, job_id, lease_token,
        // Unknown until the encode ends (a streamed recording): NULL, not a length of 0.
        info.duration > 0 ? std::optional<double>(info.duration) : std::nullopt,
        info.display_width(), info.height);
    if (r.rows() != 1) return std::nullopt;
    return std::string(r.text(0, 0));
}

std::string renditions_json(const EncodePlan& plan) {
    std::string out = "[";
    for (const auto& r : plan.renditions) {
        if (out.size() > 1) out += ", ";
        out += fmt::format(R"({{"name": {}, "width": {}, "height": {}, "playlist": {})",
                           hopper::json::quote(r.name), r.width, r.height,
                           hopper::json::quote(r.playlist));
        if (r.video_kbps > 0) out += fmt::format(R"(, "video_kbps": {})", r.video_kbps);
        out += "}";
    }
    return out + "]";
}

bool hold_job(hopper::Client& client, int64_t job_id, int64_t lease_token) {
    auto r = client.exec(
        "SELECT 1 FROM hopper.jobs WHERE id = $1 AND lease_token = $2 AND state::text = 'running' "
        "FOR UPDATE",
        job_id, lease_token);
    return r.rows() == 1;
}

void mark_processed(hopper::Client& client, const std::string& video_id, int64_t job_id,
                    const std::string& playlist_path, const EncodePlan& plan, double duration) {
    auto r = client.exec(
        "UPDATE transcode.videos SET processing_status = 'processed', processed_file_path = $3, "
        "  renditions = $4::jsonb, duration = $5, error = NULL, updated_at = pg_catalog.now() "
        "WHERE id = $1 AND job_id = $2",
        video_id, job_id, playlist_path, renditions_json(plan), duration);
    if (r.affected_rows() != 1)
        throw std::runtime_error(
            fmt::format("video {} no longer belongs to job {}", video_id, job_id));
}

bool mark_failed(hopper::Client& client, const std::string& video_id, int64_t job_id,
                 int64_t lease_token, const std::string& error, bool final) {
    auto r = client.exec(std::string("UPDATE transcode.videos SET processing_status = $5, "
                                     "  error = $4, updated_at = pg_catalog.now() "
                                     "WHERE id = $1 AND job_id = $2 "
                                     "  AND processing_status <> 'processed'") +
                             kStillOurs,
                         video_id, job_id, lease_token,
                         // Any text may reach here (a program's path in a spawn error, say): a
                         // report the server refused would leave the row as it was.
                         hopper::valid_utf8(error), final ? "failed" : "pending");
    return r.affected_rows() == 1;
}

bool mark_cancelled(hopper::Client& client, const std::string& video_id, int64_t job_id) {
    // A cancelled job holds no lease: it is the job's end in the history that counts. A retry
    // takes it out of there before the job runs again, so a new attempt's row is never touched.
    auto r = client.exec(
        "UPDATE transcode.videos SET processing_status = 'failed', error = 'cancelled', "
        "  updated_at = pg_catalog.now() "
        "WHERE id = $1 AND job_id = $2 AND processing_status <> 'processed' "
        "  AND EXISTS (SELECT 1 FROM hopper.job_history h WHERE h.id = $2 "
        "    AND h.state::text = 'cancelled')",
        video_id, job_id);
    return r.affected_rows() == 1;
}

void mark_pending(hopper::Client& client, const std::string& video_id, int64_t job_id,
                  int64_t lease_token) {
    client.exec(
        "UPDATE transcode.videos SET processing_status = 'pending', updated_at = pg_catalog.now() "
        "WHERE id = $1 AND job_id = $2 AND processing_status = 'processing' "
        // Run by another worker now (our lease lost and the job taken over): never undo its
        // claim. Still ours, the runtime releases the job only after this handler returns.
        "  AND NOT EXISTS (SELECT 1 FROM hopper.jobs j WHERE j.id = $2 AND j.state::text = "
        "'running' "
        "    AND j.lease_token <> $3)",
        video_id, job_id, lease_token);
}

std::optional<std::string> video_json(hopper::Client& client, const std::string& video_id) {
    auto r = client.exec(
        "SELECT pg_catalog.jsonb_pretty(pg_catalog.to_jsonb(v)) FROM transcode.videos v "
        "WHERE v.id = $1",
        video_id);
    if (r.rows() == 0) return std::nullopt;
    return std::string(r.text(0, 0));
}

}  // namespace transcode
