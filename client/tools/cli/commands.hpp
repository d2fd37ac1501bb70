// The hopper tool's commands. Each parses its own arguments (so every command has --help) and
// returns the process exit code; errors from the server are mapped to exit codes by main().
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "hopper/client.hpp"

namespace hopper::cli {

// Exit codes, documented in `hopper --help` and the README.
enum Exit : int {
    kOk = 0,
    kUsage = 1,        // bad command line, or a value the server rejected (SQLSTATE class 22)
    kNotFound = 2,     // no such job or queue (P0002)
    kDbError = 3,      // cannot connect, or any other database error
    kTimeout = 4,      // wait: the job did not finish in time
    kRefused = 5,      // cancel/retry: the job is not in a state that allows it
    kJobFailed = 6,    // wait: the job finished dead or cancelled
    kUnavailable = 7,  // the database lacks the function (extension missing or too old)
};

struct Io {
    std::ostream& out;
    std::ostream& err;
};

using Argv = std::vector<std::string>;

struct Args;
// The connection --db (or the PG* environment) names. Refuses, as a usage error, an argument the
// server would refuse as text (not UTF-8 in a UTF-8 session), naming it.
Client connect(const Args& a);
// The server's clock: times the tool counts from (--run-at +N, a job's running time) are the
// server's, which the machine running the tool need not agree with.
TimePoint server_now(Client& c);

int cmd_push(const Argv& argv, Io io);
int cmd_stats(const Argv& argv, Io io);
int cmd_jobs(const Argv& argv, Io io);
int cmd_show(const Argv& argv, Io io);
int cmd_retry(const Argv& argv, Io io);
int cmd_cancel(const Argv& argv, Io io);
int cmd_wait(const Argv& argv, Io io);
int cmd_watch(const Argv& argv, Io io);
int cmd_reaper(const Argv& argv, Io io);
int cmd_schedules(const Argv& argv, Io io);

}  // namespace hopper::cli
