// transcode_video: the job's life from claim to complete_with, and what each way of ending means
// for the video row and the job.
#include "transcode_job.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <hopper/json.hpp>

#include "encoder.hpp"
#include "kill_switch.hpp"
#include "names.hpp"
#include "probe.hpp"
#include "publish.hpp"
#include "stream_check.hpp"
#include "video_store.hpp"

namespace transcode {

namespace {

using Steady = std::chrono::steady_clock;

struct Payload {
    std::string video_id;
    std::string path;
};

// The server parses the payload: the client library carries JSON as text and needs no parser.
// Each field must be a JSON string: ->> would read a number, an array or an object as its text.
Payload read_payload(hopper::Client& db, const std::string& json) {
    auto r = db.exec(
        "SELECT CASE WHEN pg_catalog.jsonb_typeof(p -> 'video_id'::text) = 'string' "
        "    THEN p ->> 'video_id'::text END, "
        "  CASE WHEN pg_catalog.jsonb_typeof(p -> 'path'::text) = 'string' "
        "    THEN p ->> 'path'::text END "
        "FROM (SELECT $1::jsonb AS p) s",
        json);
    auto id = r.opt_text(0, 0);
    auto path = r.opt_text(0, 1);
    if (!id || !path || id->empty() || path->empty())
        throw hopper::PermanentFailure(
            fmt::format("payload needs \"video_id\" and \"path\" strings, got {}", json));
    if (!valid_video_id(*id))
        throw hopper::PermanentFailure(fmt::format("invalid video_id \"{}\" in payload", *id));
    return {*id, *path};
}

// How the job was stopped from outside, as this handler learnt it: through the runtime's stop
// flag (heartbeat) or earlier, through a progress report the server refused.
class StopState {
  public:
    explicit StopState(hopper::JobContext& job) : job_(job) {}
    hopper::StopReason reason() const {
        auto r = job_.stop_reason();
        return r != hopper::StopReason::None ? r : local_;
    }
    bool stopped() const { return reason() != hopper::StopReason::None; }
    void set(hopper::StopReason r) { local_ = r; }

  private:
    hopper::JobContext& job_;
    hopper::StopReason local_ = hopper::StopReason::None;
};

struct JobStopped {};

// job_status, or nullopt once the server no longer knows the job: its id was issued, so it ended
// in a queue that keeps no history (retention 0), or went with its dropped queue.
std::optional<hopper::JobInfo> status_of(hopper::Client& db, int64_t id) {
    try {
        return db.job_status(id);
    } catch (const hopper::Error& e) {
        if (e.sqlstate() != hopper::sqlstate::kNoData) throw;
        return std::nullopt;
    }
}

// The most an encode reports until its output is checked: all of the input read is not yet a
// stream to publish (ffmpeg may still fail writing it, or leave it incomplete).
constexpr double kEncodedAtMost = 0.99;

std::string seconds(double s) {
    return fmt::format("{:.1f}s", s);
}

class Transcode {
  public:
    Transcode(hopper::JobContext& job, const JobSettings& settings, Log& log)
        : job_(job), db_(job.client()), s_(settings), log_(log), stop_(job) {}

    void run();

  private:
    void say(const std::string& what) {
        log_.info(fmt::format("job {} video {}: {}", job_.id(), p_.video_id, what));
    }
    bool timed_out() const { return deadline_ && Steady::now() >= *deadline_; }
    // The session's encoding, which JSON text sent to the server is quoted in.
    int encoding() { return db_.connection().client_encoding(); }
    void check() {
        if (stop_.stopped()) throw JobStopped{};
    }
    void report(const ProgressUpdate& u, double duration);
    void finished(double duration);
    void send(double fraction, double position, double duration, bool now_or_never);
    hopper::StopReason why_not_ours();
    void on_stopped();
    void encode_and_publish(const MediaInfo& info);

    hopper::JobContext& job_;
    hopper::Client& db_;
    const JobSettings& s_;
    Log& log_;
    StopState stop_;
    Payload p_;
    std::shared_ptr<KillSwitch> kill_switch_ = std::make_shared<KillSwitch>();
    std::optional<Steady::time_point> deadline_;
    bool last_attempt_ = false;
    std::optional<RowStamp> row_stamp_;  // as this run last wrote the row
    Steady::time_point started_ = Steady::now();
    Steady::time_point last_report_{};
    int last_logged_decile_ = -1;
    std::optional<double> speed_;  // as ffmpeg last said
};

void Transcode::report(const ProgressUpdate& u, double duration) {
    // ffmpeg prints progress=end however it exits, after an error too: the block says only where
    // it got to. Done is said by finished(), once the exit status and the stream say so.
    double f = std::min(progress_fraction(u, duration), kEncodedAtMost);
    // Of an input whose length is unknown (a streamed recording) only the position is known.
    double position = u.out_time_us ? static_cast<double>(*u.out_time_us) / 1e6 : 0;
    if (duration > 0) position = std::min(position, duration);
    speed_ = u.speed;
    send(f, position, duration, u.end);
}

void Transcode::finished(double duration) {
    send(1.0, duration, duration, true);
}

void Transcode::send(double f, double position, double duration, bool now_or_never) {
    auto now = Steady::now();
    int decile = static_cast<int>(f * 10);
    if (decile > last_logged_decile_) {
        last_logged_decile_ = decile;
        say(fmt::format("{:3.0f}% ({} of {}{})", f * 100, seconds(position),
                        duration > 0 ? seconds(duration) : "an unknown length",
                        speed_ ? fmt::format(", speed {:.1f}x", *speed_) : ""));
    }
    // queue_progress is a write: a few per second at most, whatever ffmpeg's rate.
    if (!now_or_never && now - last_report_ < std::chrono::milliseconds(500)) return;
    last_report_ = now;
    std::string detail = fmt::format(R"({{"video_id": {}, "position": {:.3f}, "duration": {}{}}})",
                                     hopper::json::quote(p_.video_id, encoding()), position,
                                     duration > 0 ? fmt::format("{:.3f}", duration) : "null",
                                     speed_ ? fmt::format(R"(, "speed": {:.2f})", *speed_) : "");
    if (!job_.progress(f, detail) && !stop_.stopped()) {
        // The server refused: cancelled or taken over. Stop now rather than at the next heartbeat.
        stop_.set(why_not_ours());
        kill_switch_->fire();
    }
}

hopper::StopReason Transcode::why_not_ours() {
    // A job gone altogether (its queue keeps no history) is sorted out by on_stopped().
    auto info = status_of(db_, job_.id());
    return info && info->state == hopper::JobState::Cancelled ? hopper::StopReason::Cancelled
                                                              : hopper::StopReason::Lost;
}

void Transcode::encode_and_publish(const MediaInfo& info) {
    StagingDir::sweep_stale(s_.output_dir, p_.video_id);
    StagingDir staging(s_.output_dir, p_.video_id);
    EncodePlan plan = build_encode(s_.encode, info, p_.path, staging.path().string());
    say(fmt::format("encoding {} rendition(s) into {}", plan.renditions.size(),
                    staging.target().string()));
    EncodeOutcome out = run_encoder(
        plan.argv, p_.path, *kill_switch_,
        [&](const ProgressUpdate& u) { report(u, info.duration); },
        [&] { return !stop_.stopped() && !timed_out(); });
    check();
    if (out.abandoned || timed_out())
        throw std::runtime_error(
            fmt::format("timed out after {}: ffmpeg stopped; last output: {}",
                        seconds(std::chrono::duration<double>(Steady::now() - started_).count()),
                        out.stderr_tail.empty() ? "(none)" : out.stderr_tail));
    if (!out.status.success())
        throw std::runtime_error(
            fmt::format("ffmpeg {}: {}", out.status.describe(),
                        out.stderr_tail.empty() ? "(no output)" : out.stderr_tail));
    std::vector<PlaylistDuration> durations;
    try {
        durations = check_stream(staging.path(), plan);
    } catch (const IncompleteOutput& e) {
        // Retried: a full disk or a failing file system may be gone by the next attempt. Nothing
        // is published, so an older good stream of this video stays in place.
        throw std::runtime_error(
            fmt::format("ffmpeg exited 0 but its output is incomplete ({}; disk full?): {}",
                        e.what(), out.stderr_tail.empty() ? "(no output)" : out.stderr_tail));
    }
    // ffmpeg reads a truncated upload to where it breaks off, says "partial file" and exits 0:
    // only the stream's length against what the container declares shows it.
    if (const PlaylistDuration* cut = short_playlist(durations, info.duration))
        throw UnusableInput(fmt::format(
            "{}: the input ends early (truncated or corrupt upload?): {} lasts {} of the {} the "
            "file declares; ffmpeg: {}",
            shown_name(p_.path), cut->playlist, seconds(cut->seconds), seconds(info.duration),
            out.stderr_tail.empty() ? "(no output)" : out.stderr_tail));
    // A streamed recording's length is only known now, from what it encoded to.
    const double duration = info.duration > 0 ? info.duration : longest(durations);
    finished(duration);
    check();
    std::string playlist = (staging.target() / plan.playlist).string();
    double took = std::chrono::duration<double>(Steady::now() - started_).count();
    std::string result = fmt::format(
        R"({{"video_id": {}, "playlist": {}, "duration": {:.3f}, "renditions": {}, "seconds": {:.2f}}})",
        hopper::json::quote(p_.video_id, encoding()), hopper::json::quote(playlist, encoding()),
        duration, renditions_json(plan), took);
    // Publishing and completing cannot be one atomic step, so the order decides what a race
    // leaves behind. The job's row is locked first (held with our lease token), so a cancel or a
    // lease rescue waits for this transaction instead of slipping in between; the stream is
    // renamed into place only then, and the completion commits right after. A cancel or lost
    // lease before that publishes nothing; a failure to publish rolls the completion back. Only a
    // commit that fails after the rename leaves a stream without a processed row, and then the
    // job, still running, is rescued and encoded again.
    struct NotOurs {};
    bool ours = false;
    try {
        ours = job_.complete_with(
            [&](hopper::Client& c) {
                if (!hold_job(c, job_.id(), job_.job().lease_token)) throw NotOurs{};
                mark_processed(c, p_.video_id, job_.id(), playlist, plan, duration);
                staging.publish();
            },
            result);
    } catch (const NotOurs&) {
    }
    if (!ours) {
        stop_.set(why_not_ours());
        throw JobStopped{};
    }
    say(fmt::format("processed in {}: {}", seconds(took), playlist));
}

void Transcode::on_stopped() {
    auto reason = stop_.reason();
    std::string why(hopper::to_string(reason));
    switch (reason) {
        case hopper::StopReason::Cancelled:
            mark_cancelled(db_, p_.video_id, job_.id());
            break;
        case hopper::StopReason::Shutdown:
            // The runtime releases the job when this handler returns: it runs again, on this
            // worker or another.
            mark_pending(db_, p_.video_id, job_.id(), job_.job().lease_token);
            break;
        case hopper::StopReason::Lost:
        case hopper::StopReason::None:
            // Whoever holds the job now owns the row too. But a queue that keeps no history
            // forgets a job as it ends, a cancel included: the server then knows nothing of it,
            // nobody will run it again, and the row is this run's to settle. Before the last
            // attempt a lease that ran out puts the job back rather than ending it, so then only
            // a cancel (or its queue's drop) can have ended it.
            if (!status_of(db_, job_.id())) {
                auto error =
                    mark_ended_unkept(db_, p_.video_id, job_.id(), row_stamp_, !last_attempt_);
                why = error ? *error : "ended, and its video taken over";
            }
            break;
    }
    log_.error(fmt::format("job {} video {}: stopped ({}), ffmpeg killed, nothing published",
                           job_.id(), p_.video_id, why));
}

void Transcode::run() {
    p_ = read_payload(db_, job_.payload());
    if (s_.timeout) deadline_ = started_ + *s_.timeout;
    auto status = status_of(db_, job_.id());
    if (!status) {
        // Ended between its pull and now in a queue that keeps no history (cancelled, most
        // likely): its row is still pending and nobody else will settle it.
        auto error = mark_ended_unkept(db_, p_.video_id, job_.id(), std::nullopt, false);
        say(fmt::format("ended before it started: {}", error.value_or("row not settled")));
        return;
    }
    last_attempt_ = job_.attempt() >= status->max_attempts;
    const bool last_attempt = last_attempt_;
    row_stamp_ = claim_video(db_, p_.video_id, job_.id());
    if (!row_stamp_)
        throw hopper::PermanentFailure(fmt::format(
            "video {} has no row for job {} (deleted, finished or resubmitted under another job)",
            p_.video_id, job_.id()));
    job_.on_stop([ks = kill_switch_](hopper::StopReason) { ks->fire(); });
    try {
        say(fmt::format("attempt {}: probing {}", job_.attempt(), shown_name(p_.path)));
        MediaInfo info = probe(s_.ffprobe, p_.path, [&] {
            if (stop_.stopped() || timed_out()) throw JobStopped{};
        });
        check();
        if (auto stamp = record_probe(db_, p_.video_id, job_.id(), job_.job().lease_token, info))
            row_stamp_ = stamp;
        say(fmt::format("{}x{}, {}, {}", info.display_width(), info.height,
                        info.duration > 0 ? seconds(info.duration) : "length unknown",
                        info.has_audio ? "with audio" : "no audio"));
        encode_and_publish(info);
    } catch (const JobStopped&) {
        if (!stop_.stopped()) {
            // Only the deadline throws JobStopped without a stop: a timeout during the probe.
            std::string msg = "timed out while probing the input";
            mark_failed(db_, p_.video_id, job_.id(), job_.job().lease_token, msg, last_attempt);
            if (last_attempt) throw hopper::PermanentFailure(msg);
            throw std::runtime_error(msg);
        }
        on_stopped();
    } catch (const UnusableInput& e) {
        log_.error(fmt::format("job {} video {}: {}", job_.id(), p_.video_id, e.what()));
        mark_failed(db_, p_.video_id, job_.id(), job_.job().lease_token, e.what(), true);
        throw hopper::PermanentFailure(e.what());
    } catch (const std::exception& e) {
        // ffmpeg killed by a stop shows up as a failed encode: it is the stop that counts.
        if (stop_.stopped()) {
            on_stopped();
            return;
        }
        log_.error(fmt::format("job {} video {}: attempt {} failed{}: {}", job_.id(), p_.video_id,
                               job_.attempt(), last_attempt ? " (last attempt)" : "", e.what()));
        mark_failed(db_, p_.video_id, job_.id(), job_.job().lease_token, e.what(), last_attempt);
        if (last_attempt) throw hopper::PermanentFailure(e.what());
        throw;
    }
}

}  // namespace

void transcode_video(hopper::JobContext& job, const JobSettings& settings, Log& log) {
    Transcode(job, settings, log).run();
}

}  // namespace transcode
