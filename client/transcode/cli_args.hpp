// hopper-transcode's command line: submit, status and run, with their options.
#pragma once

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "hls.hpp"

namespace transcode {

using Micros = std::chrono::microseconds;

class UsageError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

struct SubmitArgs {
    std::string file;
    std::optional<std::string> id;
    std::optional<int> max_attempts;
};

struct StatusArgs {
    std::string id;
    bool json = false;
};

struct RunArgs {
    int concurrency = 1;
    std::string output_dir = "hls";
    EncodeSettings encode;
    std::string ffprobe = "ffprobe";
    std::optional<Micros> timeout;  // per job; unset: none
    std::optional<Micros> lease;    // unset: the queue's
    Micros shutdown_timeout = std::chrono::seconds(30);
    Micros poll_interval = std::chrono::seconds(2);
    std::optional<int> max_jobs;
    bool exit_when_idle = false;
    std::string name;
    bool quiet = false;
    // --no-session-bound: false. Unset: bound unless behind a connection pooler (the runtime's
    // WorkerOptions::session_bound).
    std::optional<bool> session_bound;
};

struct Args {
    enum class Command { Help, Submit, Status, Run };
    Command command = Command::Help;
    std::string conninfo;  // empty: the PG* environment
    std::string queue = "transcode";
    SubmitArgs submit;
    StatusArgs status;
    RunArgs run;
};

// Throws UsageError with a message naming the offending argument.
Args parse_args(int argc, const char* const* argv);

// The database holds names and paths as text, which in a UTF-8 session (hopper::utf8_session) must
// be valid UTF-8: one that is not would be refused later, in the server's words, or (a worker's)
// only after each job's encode. Throws UsageError naming `what`, the value with its stray bytes
// as \xNN, and `why`.
void require_utf8(const std::string& what, const std::string& value, const std::string& why);

// "90", "90s", "1.5s", "500ms", "2m", "1h" (a bare number is seconds).
Micros parse_duration(std::string_view text);

std::string usage();

}  // namespace transcode
