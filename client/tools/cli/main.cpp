// hopper: the command-line tool for a hopper job queue.
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "args.hpp"
#include "commands.hpp"
#include "format.hpp"
#include "hopper/error.hpp"

using namespace hopper::cli;

namespace {

const char* kHelp =
    "usage: hopper [--db CONNINFO] [--json] COMMAND [ARGS]\n"
    "\n"
    "Commands:\n"
    "  push QUEUE JSON [--kind --priority --run-at --max-attempts --dedup-key\n"
    "                   --dedup-window --concurrency-key]  push a job, print its id\n"
    "  stats [QUEUE]                             job counts per queue\n"
    "  jobs QUEUE [--state STATE] [--limit N]    a queue's jobs, newest first\n"
    "  show ID                                   one job in full\n"
    "  retry ID                                  make a dead or cancelled job available\n"
    "  cancel ID                                 cancel an unfinished job\n"
    "  wait ID [--timeout SECONDS]               wait until the job finishes\n"
    "  watch [QUEUE] [--interval S] [--once | --count N]\n"
    "                                            live view of depth, rates, running jobs\n"
    "  reaper status                             what the reaper processes last did\n"
    "  schedules                                 periodic jobs and their next runs\n"
    "\n"
    "Connection: --db CONNINFO (\"dbname=app host=...\" or a postgresql:// URL), otherwise the\n"
    "PGHOST, PGPORT, PGUSER, PGDATABASE, ... environment. --json prints JSON for scripts.\n"
    "`hopper COMMAND --help` describes each command.\n"
    "\n"
    "Exit codes:\n"
    "  0 ok                      4 wait timed out\n"
    "  1 usage or invalid value  5 refused: the job's state does not allow it\n"
    "  2 job or queue not found  6 wait: the job ended dead or cancelled\n"
    "  3 database error          7 the database lacks the function (extension missing/old)\n";

using Command = int (*)(const Argv&, Io);

int run(const std::vector<std::string>& args, Io io) {
    const std::map<std::string, Command> commands = {
        {"push", cmd_push},           {"stats", cmd_stats}, {"jobs", cmd_jobs},
        {"show", cmd_show},           {"retry", cmd_retry}, {"cancel", cmd_cancel},
        {"wait", cmd_wait},           {"watch", cmd_watch}, {"reaper", cmd_reaper},
        {"schedules", cmd_schedules},
    };
    // The command is the first word that is neither an option nor --db's value.
    size_t at = 0;
    while (at < args.size() && args[at].rfind("-", 0) == 0) at += args[at] == "--db" ? 2 : 1;
    if (at > args.size()) {
        io.err << "hopper: --db needs a value\n(see hopper --help)\n";
        return kUsage;
    }
    if (at >= args.size()) {
        bool help = false;
        for (const auto& a : args) help = help || a == "--help" || a == "-h";
        (help ? io.out : io.err) << kHelp;
        return help ? kOk : kUsage;
    }
    auto it = commands.find(args[at]);
    if (it == commands.end()) {
        io.err << fmt::format("hopper: unknown command \"{}\"\n\n{}", args[at], kHelp);
        return kUsage;
    }
    Argv rest(args.begin(), args.begin() + static_cast<long>(at));
    rest.insert(rest.end(), args.begin() + static_cast<long>(at) + 1, args.end());
    try {
        return it->second(rest, io);
    } catch (const UsageError& e) {
        io.err << fmt::format("hopper {}: {}\n(see hopper {} --help)\n", args[at], e.what(),
                              args[at]);
        return kUsage;
    } catch (const hopper::ConnectionError& e) {
        io.err << fmt::format("hopper: {}\n", terminal_text(e.what(), true));
        return kDbError;
    } catch (const hopper::Error& e) {
        // A server message may quote data (a dedup key, a queue name given): printed as text.
        const std::string& st = e.sqlstate();
        io.err << fmt::format("hopper: {}\n", terminal_text(e.what(), true));
        // What was wrong in particular (which JSON token, say), when the server says it apart
        // from its message.
        if (!e.detail().empty())
            io.err << fmt::format("detail: {}\n", terminal_text(e.detail(), true));
        if (!e.hint().empty()) io.err << fmt::format("hint: {}\n", terminal_text(e.hint(), true));
        if (st == "P0002") return kNotFound;
        if (st == "55000") return kRefused;
        if (st == "42883" || st == "3F000") {
            io.err << "hopper: is the extension installed here? (CREATE EXTENSION hopper)\n";
            return kUnavailable;
        }
        if (st.rfind("22", 0) == 0 || st == "54000") return kUsage;
        return kDbError;
    } catch (const std::exception& e) {
        io.err << fmt::format("hopper: {}\n", e.what());
        return kDbError;
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    return run(args, Io{std::cout, std::cerr});
}
