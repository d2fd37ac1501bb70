// status: the video row and its job, as a web API would show them.
#include <iostream>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <hopper/client.hpp>

#include "commands.hpp"
#include "terminal_text.hpp"
#include "video_store.hpp"

namespace transcode {

namespace {

// What the row and the job hold came from uploads and programs (a file name, ffmpeg's output):
// shown with its control characters escaped. A name stays on its line; an error keeps its lines.
std::string line(std::string_view v) {
    return hopper::text::terminal_text(v);
}
std::string lines(std::string_view v) {
    return hopper::text::terminal_text(v, true);
}

std::string opt(const std::optional<std::string>& v) {
    return v ? line(*v) : "-";
}

}  // namespace

int status_command(const Args& args) {
    hopper::Client client(args.conninfo);
    ensure_schema(client);
    const std::string& id = args.status.id;
    // No row can hold any other id (the table's CHECK): saying so beats the server's refusal of
    // bytes that are not UTF-8.
    require_video_id(id);
    try {
        // A job that ended without a worker leaves its row pending or processing until settled.
        settle_ended_jobs(client, id);
    } catch (const hopper::Error& e) {
        // A reader without UPDATE on the table, or a read-only standby: show the row as it is
        // (the job's own state is shown below it).
        if (e.sqlstate() != "42501" && e.sqlstate() != "25006") throw;
    }
    auto r = client.exec(
        "SELECT processing_status, raw_file_path, processed_file_path, duration, width, height, "
        "  renditions::text, error, job_id, created_at::text, updated_at::text "
        "FROM transcode.videos WHERE id = $1",
        id);
    if (r.rows() == 0) {
        std::cerr << fmt::format("no video {}\n", id);
        // A script reading stdout gets an answer it can parse too.
        if (args.status.json) std::cout << "null" << std::endl;
        return 1;
    }
    auto job_id = r.opt_int64(0, 8);
    std::optional<hopper::JobInfo> job;
    if (job_id) {
        try {
            job = client.job_status(*job_id);
        } catch (const hopper::Error& e) {
            // The job's history may have been pruned; the row still says what happened.
            if (e.sqlstate() != hopper::sqlstate::kNoData) throw;
        }
    }
    if (args.status.json) {
        // One shape whatever is known: the job is null once the server no longer knows it (its
        // history pruned, its queue keeping none) or when the row names none.
        // Deleted since it was read above: the answer for no such video.
        const std::optional<std::string> row = video_json(client, id);
        if (!row) {
            std::cerr << fmt::format("no video {}\n", id);
            std::cout << "null" << std::endl;
            return 1;
        }
        const std::string& video = *row;
        std::optional<std::string> out;
        if (job) {
            try {
                auto j = client.exec(
                    "SELECT pg_catalog.jsonb_pretty(pg_catalog.jsonb_build_object("
                    "  'video', $1::jsonb, 'job', (SELECT pg_catalog.to_jsonb(s) - 'payload'::text "
                    "  FROM hopper.job_status($2) s)))",
                    video, *job_id);
                out = std::string(j.text(0, 0));
            } catch (const hopper::Error& e) {
                // Pruned since it was read above.
                if (e.sqlstate() != hopper::sqlstate::kNoData) throw;
            }
        }
        if (!out) {
            auto j = client.exec(
                "SELECT pg_catalog.jsonb_pretty(pg_catalog.jsonb_build_object("
                "  'video', $1::jsonb, 'job', NULL::jsonb))",
                video);
            out = std::string(j.text(0, 0));
        }
        std::cout << *out << std::endl;
        return 0;
    }
    std::cout << fmt::format("video:      {}\n", id)
              << fmt::format("status:     {}\n", line(r.text(0, 0)))
              << fmt::format("raw file:   {}\n", line(r.text(0, 1)))
              << fmt::format("playlist:   {}\n", opt(r.opt_text(0, 2)));
    // A streamed recording's length is known only once it is encoded; its size from the probe.
    if (!r.is_null(0, 4))
        std::cout << fmt::format(
            "source:     {}x{}, {}\n", r.text(0, 4), r.text(0, 5),
            r.is_null(0, 3) ? "length unknown yet" : fmt::format("{:.2f}s", r.float8(0, 3)));
    if (!r.is_null(0, 6)) std::cout << fmt::format("renditions: {}\n", line(r.text(0, 6)));
    if (!r.is_null(0, 7)) std::cout << fmt::format("error:      {}\n", lines(r.text(0, 7)));
    std::cout << fmt::format("created:    {}\nupdated:    {}\n", r.text(0, 9), r.text(0, 10));
    if (job) {
        std::cout << fmt::format("job:        {} ({}, attempt {} of {}", job->id,
                                 hopper::to_string(job->state), job->attempt, job->max_attempts);
        if (job->progress && job->state == hopper::JobState::Running)
            std::cout << fmt::format(", {:.0f}% done", *job->progress * 100);
        std::cout << ")\n";
        // A completed job keeps the error of an earlier attempt; it is no longer the news.
        if (job->last_error && job->state != hopper::JobState::Completed)
            std::cout << fmt::format("job error:  {}\n", lines(*job->last_error));
    }
    return 0;
}

}  // namespace transcode
