// The transcoder's own table, transcode.videos: one row per uploaded video, what a web API reads
// to show a video's state. Every statement binds its values; nothing is spliced into SQL.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <hopper/client.hpp>

#include "hls.hpp"
#include "probe.hpp"

namespace transcode {

inline constexpr const char* kJobKind = "process_raw_video";

// Creates the schema and table if absent (safe to run from several processes at once).
void ensure_schema(hopper::Client& client);

// Video ids name output directories, so they are restricted to a safe file name.
bool valid_video_id(const std::string& id);
// Throws std::invalid_argument, saying what an id may hold, for one that is not valid.
void require_video_id(const std::string& id);

struct Submitted {
    std::string video_id;
    int64_t job_id = 0;
};

// Inserts the video row (pending) and pushes its job in one transaction. An existing id is only
// accepted again when its last processing failed; throws std::runtime_error otherwise.
Submitted submit_video(hopper::Client& client, const std::string& queue,
                       const std::optional<std::string>& id, const std::string& raw_path,
                       std::optional<int> max_attempts);

// The moment a run last wrote its video row (updated_at, in microseconds): while the row still
// has it, no other run of the job has claimed the row since.
using RowStamp = std::string;

// Marks the video processing for this job and returns the row's stamp. nullopt: the row is gone,
// belongs to another job (the video was resubmitted) or is processed, so this job must not touch
// it. A failed row of this very job is taken: the job was retried (hopper retry) after it died.
std::optional<RowStamp> claim_video(hopper::Client& client, const std::string& video_id,
                                    int64_t job_id);

// Rows still pending or processing whose job ended without the handler saying so (cancelled
// before a worker took it, dead after its last lease ran out or its worker crashed) become
// failed, with the job's last error (or "cancelled"); when the job's queue keeps no history,
// with unkept_end_error(). All such rows, or the one of video_id. Returns the ids of the videos
// settled. In an open transaction it asks job_status under a savepoint.
std::vector<std::string> settle_ended_jobs(hopper::Client& client,
                                           const std::optional<std::string>& video_id);

// Of `video_ids`, those whose row is there and not processing. A run makes its staging directory
// only once its claim has the row processing, and removes it before it moves the row on itself:
// for such a row, a staging directory found before this look is no running encode's to write
// into (a job that ended under it, a run that was cut off or whose job was taken over; none can
// publish). A processing row's may be one's, on any worker sharing the directory; a video
// without a row has none, but a directory shared with another database's workers would.
std::vector<std::string> videos_not_processing(hopper::Client& client,
                                               const std::vector<std::string>& video_ids);

// While the job runs under `lease_token`; otherwise (the lease was lost) nothing is written.
// Returns the row's new stamp, or nullopt when nothing was written.
std::optional<RowStamp> record_probe(hopper::Client& client, const std::string& video_id,
                                     int64_t job_id, int64_t lease_token, const MediaInfo& info);

// true: the server no longer knows the job (job_status: P0002). Its id was issued, so it ended
// in a queue that keeps no history (retention 0), or went with its dropped queue; nothing will
// ever run it again. Under a savepoint when a transaction is open, which the error would abort.
bool job_gone(hopper::Client& client, int64_t job_id);

// What a row says when its job ended with no handler reporting it and nothing on the server
// tells how: "job N ended ... cancelled, or dead after its last attempt".
std::string unkept_end_error(int64_t job_id);

// The job this run held is gone (job_gone): its row, still pending or processing, becomes
// failed. "cancelled" when `cancel_only_end` (the run was not the job's last attempt, so a lease
// that ran out would have put the job back rather than ended it) and the row still carries
// `stamp` (no later run claimed it); otherwise unkept_end_error(). A row the settler got to
// first with unkept_end_error() is corrected to "cancelled" the same way. Returns the error
// written, or nullopt when the row was not this run's to settle.
std::optional<std::string> mark_ended_unkept(hopper::Client& client, const std::string& video_id,
                                             int64_t job_id, const std::optional<RowStamp>& stamp,
                                             bool cancel_only_end);

// Inside a transaction: locks the job's row if it is still running under `lease_token`, so no
// cancel, rescue or other worker changes it before the commit. false: the job is not ours.
bool hold_job(hopper::Client& client, int64_t job_id, int64_t lease_token);

// Inside the completing transaction: processed, with where the stream is and what it holds.
void mark_processed(hopper::Client& client, const std::string& video_id, int64_t job_id,
                    const std::string& playlist_path, const EncodePlan& plan, double duration);

// `final`: no attempt will follow (failed); otherwise back to pending for the retry. Only while
// the job still runs under `lease_token`: false (nothing written) once another worker may own it.
// Bytes of `error` that are not UTF-8 are stored as U+FFFD.
bool mark_failed(hopper::Client& client, const std::string& video_id, int64_t job_id,
                 int64_t lease_token, const std::string& error, bool final);

// A job cancelled while it ran: its row becomes failed ("cancelled"), unless the job has been
// retried since (then the row is the new attempt's). false: nothing written.
bool mark_cancelled(hopper::Client& client, const std::string& video_id, int64_t job_id);

// A job stopped by the worker's shutdown is released when its handler returns, and will run
// again: the video waits as pending, unless another worker runs the job already.
void mark_pending(hopper::Client& client, const std::string& video_id, int64_t job_id,
                  int64_t lease_token);

// JSON for one video row (with its job id), or nullopt if there is no such video.
std::optional<std::string> video_json(hopper::Client& client, const std::string& video_id);

// JSON array describing renditions, for the row and the job result.
std::string renditions_json(const EncodePlan& plan);

}  // namespace transcode
