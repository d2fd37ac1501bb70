// parse_args: a small hand-written parser; every error names the argument and what is allowed.
#include "cli_args.hpp"

#include <cmath>
#include <cstdlib>
#include <vector>

#include <fmt/format.h>
#include <hopper/types.hpp>
#include <hopper/utf8.hpp>

namespace transcode {

namespace {

int parse_int(const std::string& opt, const std::string& v, int min, int max) {
    char* end = nullptr;
    long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < min || n > max)
        throw UsageError(
            fmt::format("{}: expected an integer from {} to {}, got \"{}\"", opt, min, max, v));
    return static_cast<int>(n);
}

std::vector<int> parse_heights(const std::string& opt, const std::string& v) {
    std::vector<int> out;
    size_t start = 0;
    while (start <= v.size()) {
        size_t comma = v.find(',', start);
        std::string item =
            v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!item.empty() && (item.back() == 'p' || item.back() == 'P')) item.pop_back();
        out.push_back(parse_int(opt, item, 16, 8640));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

// An AAC bitrate as ffmpeg reads it: bits per second, or with k/K (thousands) or M (millions).
// ffmpeg takes a lower-case m for milli, so it is not offered. Checked here because ffmpeg only
// looks at it when a job with audio runs, and then every such job would fail.
std::string parse_bitrate(const std::string& opt, const std::string& v) {
    size_t digits = v.find_first_not_of("0123456789.");
    std::string number = v.substr(0, digits);
    std::string unit = digits == std::string::npos ? "" : v.substr(digits);
    double scale = unit.empty() ? 1 : unit == "k" || unit == "K" ? 1e3 : unit == "M" ? 1e6 : 0;
    bool shape = !number.empty() && number.front() != '.' && number.back() != '.' &&
                 number.find('.') == number.rfind('.');
    double bps = shape ? std::strtod(number.c_str(), nullptr) * scale : 0;
    if (!(bps >= 8e3 && bps <= 1e6))
        throw UsageError(fmt::format(
            "{}: expected a bitrate from 8k to 1M, like 128k or 96000 (bits per second), got "
            "\"{}\"",
            opt, v));
    return v;
}

// The server's limits on what a worker sends with every pull: a value past them is refused at
// each pull, and the worker would retry forever without taking a job.
constexpr size_t kMaxWorkerName = 128;  // bytes
constexpr auto kMaxLease = std::chrono::hours(24);

std::string queue_name(const std::string& q) {
    if (!hopper::is_queue_name(q))
        throw UsageError(fmt::format(
            "--queue: invalid queue name \"{}\": 1 to 48 characters from A-Z a-z 0-9 _ . : -, "
            "starting with a letter or digit",
            hopper::escaped_utf8(q)));
    // Its channel, hopper:done, carries the notifications of finished jobs.
    if (q == "done") throw UsageError("--queue: the queue name \"done\" is reserved");
    return q;
}

// Walks argv, splitting "--opt=value" and handing out values.
class Cursor {
  public:
    Cursor(int argc, const char* const* argv) : args_(argv + 1, argv + argc) {}
    bool done() const { return i_ >= args_.size(); }
    std::string next() {
        pending_value_.reset();
        std::string a = args_[i_++];
        if (a.rfind("--", 0) == 0) {
            auto eq = a.find('=');
            if (eq != std::string::npos) {
                pending_value_ = a.substr(eq + 1);
                a = a.substr(0, eq);
            }
        }
        return a;
    }
    // The next argument as it is, never split or taken for an option.
    std::string word() { return args_[i_++]; }
    std::string value(const std::string& opt) {
        if (pending_value_) {
            std::string v = *pending_value_;
            pending_value_.reset();
            return v;
        }
        if (done()) throw UsageError(fmt::format("{} needs a value", opt));
        return args_[i_++];
    }
    void no_value(const std::string& opt) {
        if (pending_value_) throw UsageError(fmt::format("{} takes no value", opt));
    }

  private:
    std::vector<std::string> args_;
    size_t i_ = 0;
    std::optional<std::string> pending_value_;
};

}  // namespace

void require_utf8(const std::string& what, const std::string& value, const std::string& why) {
    if (hopper::valid_utf8(value) == value) return;
    throw UsageError(
        fmt::format("{} \"{}\" is not valid UTF-8: {}", what, hopper::escaped_utf8(value), why));
}

Micros parse_duration(std::string_view text) {
    std::string s(text);
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    std::string unit = end ? std::string(end) : "";
    double scale;
    if (unit.empty() || unit == "s") {
        scale = 1e6;
    } else if (unit == "ms") {
        scale = 1e3;
    } else if (unit == "m" || unit == "min") {
        scale = 60e6;
    } else if (unit == "h") {
        scale = 3600e6;
    } else {
        scale = -1;
    }
    if (s.empty() || end == s.c_str() || scale < 0 || !(v >= 0) || !std::isfinite(v))
        throw UsageError(fmt::format(
            "invalid duration \"{}\": use a number with an optional unit ms, s, m or h", text));
    // A year is more than any setting here needs; past about 292,000 years the microseconds would
    // overflow (llround of an out-of-range value is unspecified).
    if (v * scale > 366.0 * 86400e6)
        throw UsageError(fmt::format("invalid duration \"{}\": at most a year", text));
    return Micros(static_cast<int64_t>(std::llround(v * scale)));
}

Args parse_args(int argc, const char* const* argv) {
    Args a;
    Cursor c(argc, argv);
    if (c.done()) throw UsageError("missing command: submit, status or run");
    std::string cmd = c.next();
    if (cmd == "-h" || cmd == "--help" || cmd == "help") return a;
    if (cmd == "submit") {
        a.command = Args::Command::Submit;
    } else if (cmd == "status") {
        a.command = Args::Command::Status;
    } else if (cmd == "run") {
        a.command = Args::Command::Run;
    } else {
        throw UsageError(fmt::format("unknown command \"{}\": use submit, status or run", cmd));
    }
    std::vector<std::string> positional;
    RunArgs& r = a.run;
    while (!c.done()) {
        std::string o = c.next();
        auto is = [&](const char* name, Args::Command only) {
            if (o != name) return false;
            if (a.command != only)
                throw UsageError(fmt::format("{} is not an option of {}", o, cmd));
            return true;
        };
        constexpr auto kSubmit = Args::Command::Submit;
        constexpr auto kStatus = Args::Command::Status;
        constexpr auto kRun = Args::Command::Run;
        if (o == "--") {
            // The end of options: what follows is positional, even a file named "-x.mp4".
            while (!c.done()) positional.push_back(c.word());
            break;
        } else if (o == "-h" || o == "--help") {
            a.command = Args::Command::Help;
            return a;
        } else if (o == "--dsn") {
            a.conninfo = c.value(o);
        } else if (o == "--queue") {
            a.queue = queue_name(c.value(o));
        } else if (is("--id", kSubmit)) {
            a.submit.id = c.value(o);
        } else if (is("--max-attempts", kSubmit)) {
            a.submit.max_attempts = parse_int(o, c.value(o), 1, 1000);
        } else if (is("--json", kStatus)) {
            c.no_value(o);
            a.status.json = true;
        } else if (is("--concurrency", kRun)) {
            r.concurrency = parse_int(o, c.value(o), 1, 256);
        } else if (is("--output-dir", kRun)) {
            r.output_dir = c.value(o);
            // A '%' is refused by run_command, which sees the directory made absolute.
            if (r.output_dir.empty()) throw UsageError("--output-dir must not be empty");
        } else if (is("--ladder", kRun)) {
            c.no_value(o);
            r.encode.ladder = true;
        } else if (is("--ladder-heights", kRun)) {
            r.encode.ladder_heights = parse_heights(o, c.value(o));
            r.encode.ladder = true;
        } else if (is("--hls-time", kRun)) {
            r.encode.hls_time = parse_int(o, c.value(o), 1, 600);
        } else if (is("--preset", kRun)) {
            static const char* kPresets[] = {"ultrafast", "superfast", "veryfast", "faster",
                                             "fast",      "medium",    "slow",     "slower",
                                             "veryslow",  "placebo"};
            std::string p = c.value(o);
            bool known = false;
            for (const char* k : kPresets) known = known || p == k;
            if (!known)
                throw UsageError(fmt::format(
                    "--preset: unknown libx264 preset \"{}\" (ultrafast ... veryslow)", p));
            r.encode.preset = p;
        } else if (is("--crf", kRun)) {
            r.encode.crf = parse_int(o, c.value(o), 0, 51);
        } else if (is("--audio-bitrate", kRun)) {
            r.encode.audio_bitrate = parse_bitrate(o, c.value(o));
        } else if (is("--threads", kRun)) {
            r.encode.threads = parse_int(o, c.value(o), 0, 64);
        } else if (is("--ffmpeg", kRun)) {
            r.encode.ffmpeg = c.value(o);
        } else if (is("--ffprobe", kRun)) {
            r.ffprobe = c.value(o);
        } else if (is("--timeout", kRun)) {
            Micros t = parse_duration(c.value(o));
            if (t.count() > 0) r.timeout = t;
        } else if (is("--lease", kRun)) {
            Micros t = parse_duration(c.value(o));
            if (t < std::chrono::seconds(1) || t > kMaxLease)
                throw UsageError(
                    "--lease must be from 1s to 24h (a lease lasts at most a day; "
                    "heartbeats renew it while a job runs)");
            r.lease = t;
        } else if (is("--shutdown-timeout", kRun)) {
            r.shutdown_timeout = parse_duration(c.value(o));
        } else if (is("--poll-interval", kRun)) {
            r.poll_interval = parse_duration(c.value(o));
            if (r.poll_interval < std::chrono::milliseconds(50))
                throw UsageError("--poll-interval must be at least 50ms");
        } else if (is("--max-jobs", kRun)) {
            r.max_jobs = parse_int(o, c.value(o), 1, 1000000);
        } else if (is("--exit-when-idle", kRun)) {
            c.no_value(o);
            r.exit_when_idle = true;
        } else if (is("--name", kRun)) {
            r.name = c.value(o);
            if (r.name.size() > kMaxWorkerName)
                throw UsageError(fmt::format("--name is {} bytes long; the limit is {}",
                                             r.name.size(), kMaxWorkerName));
        } else if (is("--quiet", kRun)) {
            c.no_value(o);
            r.quiet = true;
        } else if (is("--no-session-bound", kRun)) {
            c.no_value(o);
            r.session_bound = false;
        } else if (o.rfind("-", 0) == 0 && o.size() > 1) {
            throw UsageError(fmt::format("unknown option {} for {}", o, cmd));
        } else {
            positional.push_back(o);
        }
    }
    auto want = [&](size_t n, const char* what) {
        if (positional.size() < n) throw UsageError(fmt::format("{} needs {}", cmd, what));
        if (positional.size() > n)
            throw UsageError(fmt::format("unexpected argument \"{}\"", positional[n]));
    };
    switch (a.command) {
        case Args::Command::Submit:
            want(1, "a FILE");
            a.submit.file = positional[0];
            break;
        case Args::Command::Status:
            want(1, "a video ID");
            a.status.id = positional[0];
            break;
        case Args::Command::Run:
            want(0, "no arguments");
            break;
        case Args::Command::Help:
            break;
    }
    return a;
}

std::string usage() {
    return R"(usage: hopper-transcode COMMAND [options]

Turns raw uploaded videos into HLS streams through the hopper job queue.
The database comes from the PG* environment (PGHOST, PGPORT, PGUSER, PGDATABASE) or --dsn.

  submit [--id ID] [--max-attempts N] [--] FILE
      Records the video (transcode.videos, pending) and pushes its job in one transaction.
      Prints the job id. After --, a FILE may start with '-'.
  status ID [--json]
      The video's row and its job's state and progress.
  run [options]
      The worker: pulls jobs, probes with ffprobe, encodes with ffmpeg, publishes atomically.
      --concurrency N        jobs encoded at once (default 1)
      --output-dir DIR       where streams go, DIR/<video id>/ (default ./hls)
      --hls-time S           target segment length in seconds (default 10)
      --ladder               1080p/720p/480p renditions (never upscaled) and a master playlist
      --ladder-heights LIST  the ladder's heights, e.g. 720,480,360 (implies --ladder)
      --preset P             libx264 preset (default veryfast), --crf N (default 23)
      --audio-bitrate B      AAC bitrate (default 128k), --threads N (ffmpeg threads, default auto)
      --timeout DUR          give up on a job after DUR (default: no limit), e.g. 30m
      --lease DUR            job lease, 1s to 24h (default: the queue's); renewed at a third
      --shutdown-timeout DUR on SIGINT/SIGTERM wait this long for running jobs (default 30s);
                             a second signal releases them at once
      --poll-interval DUR    how long one wait for jobs lasts in the server (default 2s)
      --max-jobs N           take N jobs at most (whatever --concurrency), exit when done
      --exit-when-idle       exit once the queue has nothing available or running
      --name NAME            worker name recorded on jobs, up to 128 bytes (default host:pid)
      --no-session-bound     do not bind leases to the server session (the default behind a
                             connection pooler it recognizes; see HOPPER_POOLER in README.md)
      --ffmpeg PATH, --ffprobe PATH, --quiet
Common options: --queue Q (default transcode; 1-48 of A-Z a-z 0-9 _ . : -), --dsn CONNINFO.
)";
}

}  // namespace transcode
