// push, stats, jobs, show, retry, cancel, wait and reaper status.
#include "commands.hpp"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "args.hpp"
#include "format.hpp"
#include "hopper/client.hpp"
#include "hopper/json.hpp"
#include "hopper/utf8.hpp"

namespace hopper::cli {

TimePoint server_now(Client& c) {
    int64_t us = c.exec(
                      "SELECT (EXTRACT(epoch FROM pg_catalog.statement_timestamp()) * "
                      "1000000::numeric)::int8")
                     .int64(0, 0);
    return TimePoint(std::chrono::duration_cast<Clock::duration>(std::chrono::microseconds(us)));
}

namespace {

const std::set<std::string> kGlobalValues = {"db"};
const std::set<std::string> kGlobalFlags = {"json", "help"};

// Parses argv with the global options added; prints `help` and returns true for --help.
bool parse_or_help(const Argv& argv, std::set<std::string> values, std::set<std::string> flags,
                   const char* help, Io io, Args& out) {
    values.insert(kGlobalValues.begin(), kGlobalValues.end());
    flags.insert(kGlobalFlags.begin(), kGlobalFlags.end());
    out = parse(argv, values, flags);
    if (out.flag("help")) {
        io.out << help;
        return true;
    }
    return false;
}

void want_positional(const Args& a, size_t min, size_t max, const char* what) {
    if (a.positional.size() > max)
        throw UsageError(
            fmt::format("unexpected argument \"{}\" (expected {})", a.positional[max], what));
    if (a.positional.size() < min) throw UsageError(fmt::format("expected {}", what));
}

int64_t job_id_arg(const std::string& s) {
    return parse_integer("ID", s, 1, std::numeric_limits<int64_t>::max());
}

// N followed by a unit: s, m, h or d (e.g. 90s, 10m).
// Durations and +N offsets stay within what a push accepts ahead of now (about 10 years).
constexpr long long kMaxAheadSeconds = 3660LL * 86400;

std::chrono::seconds duration_arg(const char* option, const std::string& s) {
    char unit = s.empty() ? '\0' : s.back();
    long long mult = unit == 's'   ? 1
                     : unit == 'm' ? 60
                     : unit == 'h' ? 3600
                     : unit == 'd' ? 86400
                                   : 0;
    if (mult == 0)
        throw UsageError(fmt::format("{} needs a unit: s, m, h or d (e.g. 90s)", option));
    // The bound applies to the product: a count of days within 3660 * 86400 overflowed the
    // clock's nanoseconds once multiplied, and wrapped to a short window.
    long long n = parse_integer(option, s.substr(0, s.size() - 1), 1, kMaxAheadSeconds / mult);
    return std::chrono::seconds(n * mult);
}

// "+90s", "+5m", "+2h", "+1d" from the server's now, or any timestamp PostgreSQL understands.
TimePoint run_at_arg(Client& c, const std::string& s) {
    if (!s.empty() && s[0] == '+') {
        char unit = s.back();
        long long mult = unit == 's'   ? 1
                         : unit == 'm' ? 60
                         : unit == 'h' ? 3600
                         : unit == 'd' ? 86400
                                       : 0;
        if (mult == 0) throw UsageError("--run-at +N needs a unit: s, m, h or d (e.g. +90s)");
        long long n =
            parse_integer("--run-at", s.substr(1, s.size() - 2), 0, kMaxAheadSeconds / mult);
        return server_now(c) + std::chrono::seconds(n * mult);
    }
    std::optional<std::string> us_text;
    try {
        // NULL for infinity and -infinity, which are valid timestamps but no time to run at.
        auto r = c.exec(
            "SELECT CASE WHEN pg_catalog.isfinite(t) THEN (EXTRACT(epoch FROM t) * "
            "1000000::numeric)::int8 "
            "END::text FROM (SELECT $1::timestamptz AS t) AS s",
            s);
        us_text = r.opt_text(0, 0);
    } catch (const Error& e) {
        // Text the server cannot read as a time (class 22: bad syntax, a field out of range).
        if (e.sqlstate().rfind("22", 0) != 0) throw;
        throw UsageError(fmt::format(
            "--run-at must be a timestamp (e.g. '2030-01-01 09:00+00') or +N[s|m|h|d], got \"{}\"",
            s));
    }
    if (!us_text) throw UsageError(fmt::format("--run-at must be a finite time, got \"{}\"", s));
    int64_t us = std::stoll(*us_text);
    // The clock counts nanoseconds from 1970 and ends in 2262; past it the time would wrap. The
    // server refuses anything more than about 10 years ahead anyway.
    const auto limit = std::chrono::duration_cast<std::chrono::microseconds>(
        Clock::duration::max() - std::chrono::hours(24));
    if (us > limit.count() || us < -limit.count())
        throw UsageError(fmt::format("--run-at \"{}\" is too far from now", s));
    return TimePoint(std::chrono::duration_cast<Clock::duration>(std::chrono::microseconds(us)));
}

// A time the server reports, formatted by the server in UTC (the JSON form): the client's clock
// ends in 2262, and a timestamptz goes on to the year 294276 and to infinity, which no integer
// holds. "infinity" and "-infinity" come through as such.
#define HOPPER_UTC_ISO(col)                                               \
    "CASE WHEN pg_catalog.isfinite(" col ") THEN pg_catalog.to_char(" col \
    " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"') ELSE " col "::text END"

// The table's form of an HOPPER_UTC_ISO time: 2030-01-02 03:04:05 UTC.
std::string iso_text(const std::string& iso) {
    auto t = iso.find('T');
    if (t == std::string::npos) return iso;
    return iso.substr(0, t) + ' ' + iso.substr(t + 1, iso.find('.') - t - 1) + " UTC";
}

}  // namespace

int cmd_push(const Argv& argv, Io io) {
    static const char* help =
        "usage: hopper push QUEUE JSON [options]\n"
        "Pushes one job; prints its id (with --json: {\"id\": N, \"queue\": ...}).\n"
        "  --kind KIND              the job's kind (selects the worker's handler)\n"
        "  --priority N             smaller runs first (-32768..32767, default 0)\n"
        "  --run-at TIME            a timestamp, or +N[s|m|h|d] from now (default: now)\n"
        "  --max-attempts N         attempts before the job is dead (default: the queue's)\n"
        "  --dedup-key KEY          while a job with this key is unfinished, return its id\n"
        "  --dedup-window N[s|m|h|d]  with --dedup-key: also a job with the key that finished\n"
        "                           after being created within this window (e.g. 10m)\n"
        "  --concurrency-key KEY    what the job counts against for the queue's concurrency and\n"
        "                           rate limits (a tenant, an account, an API)\n"
        "  --db CONNINFO  --json  --help\n";
    Args a;
    if (parse_or_help(argv,
                      {"kind", "priority", "run-at", "max-attempts", "dedup-key", "dedup-window",
                       "concurrency-key"},
                      {}, help, io, a))
        return kOk;
    want_positional(a, 2, 2, "QUEUE and JSON");
    PushOptions o;
    // The server's refusals speak of the function's arguments and of NULL ("pass NULL for
    // none"), which means nothing here: these say which option and what to do instead.
    auto text_option = [&](const char* name) {
        auto v = a.option(name);
        if (v && v->empty())
            throw UsageError(
                fmt::format("--{} must not be empty (leave the option out for none)", name));
        return v;
    };
    o.kind = text_option("kind");
    if (auto p = a.integer("priority", -32768, 32767)) o.priority = static_cast<int>(*p);
    if (auto m = a.integer("max-attempts", 1, 1000)) o.max_attempts = static_cast<int>(*m);
    o.dedup_key = text_option("dedup-key");
    o.concurrency_key = text_option("concurrency-key");
    if (auto w = a.option("dedup-window")) {
        if (!o.dedup_key)
            throw UsageError("--dedup-window needs --dedup-key: the key it applies to");
        o.dedup_window = duration_arg("--dedup-window", *w);
    }
    Client c = connect(a);
    if (auto r = a.option("run-at")) o.run_at = run_at_arg(c, *r);
    int64_t id = 0;
    try {
        id = c.push(a.positional[0], a.positional[1], o);
    } catch (const Error& e) {
        const std::string msg = e.what();
        // Text that is no JSON: of all a push sends, only the payload is parsed from text the
        // user wrote (22P02 invalid_text_representation); the server's detail says where.
        if (e.sqlstate() == "22P02")
            throw UsageError(fmt::format("JSON is not valid JSON: {}",
                                         terminal_text(e.detail().empty() ? msg : e.detail())));
        // JSON nested deeper than the server's parser goes (54001 statement_too_complex, "stack
        // depth limit exceeded"): the payload is at fault, not the server, whose hint to raise
        // max_stack_depth is no advice for a job's payload. (A trigger of the operator's that
        // recurses too deep says so in other words, and is passed on as it is.)
        if (e.sqlstate() == sqlstate::kStatementTooComplex &&
            msg.find("stack depth limit exceeded") != std::string::npos)
            throw UsageError("JSON is nested too deeply for the server to parse");
        // The server's own range for run_at (about 10 years ahead, 1 year behind, measured from
        // its clock): name the option it came from, not the function's argument.
        if (!o.run_at || e.sqlstate() != sqlstate::kInvalidParameter ||
            msg.rfind("run_at ", 0) != 0)
            throw;
        throw UsageError(fmt::format("--run-at \"{}\" {}", *a.option("run-at"), msg.substr(7)));
    }
    if (a.flag("json"))
        io.out << fmt::format("{{\"id\": {}, \"queue\": {}}}\n", id, json::quote(a.positional[0]));
    else
        io.out << id << '\n';
    return kOk;
}

int cmd_stats(const Argv& argv, Io io) {
    static const char* help =
        "usage: hopper stats [QUEUE]\n"
        "Job counts per queue (all queues without QUEUE).\n"
        "  --db CONNINFO  --json  --help\n";
    Args a;
    if (parse_or_help(argv, {}, {}, help, io, a)) return kOk;
    want_positional(a, 0, 1, "at most one QUEUE");
    Client c = connect(a);
    std::optional<std::string> queue;
    if (!a.positional.empty()) queue = a.positional[0];
    auto stats = c.stats(queue);
    if (a.flag("json")) {
        io.out << '[';
        for (size_t i = 0; i < stats.size(); ++i) io.out << (i ? ", " : "") << stat_json(stats[i]);
        io.out << "]\n";
        return kOk;
    }
    Table t({"QUEUE", "AVAILABLE", "SCHEDULED", "RUNNING", "COMPLETED", "DEAD", "CANCELLED",
             "OLDEST", "PAUSED"});
    for (const auto& s : stats)
        t.add({s.queue, std::to_string(s.available), std::to_string(s.scheduled),
               std::to_string(s.running), std::to_string(s.completed), std::to_string(s.dead),
               std::to_string(s.cancelled),
               s.oldest_available_age ? age_text(*s.oldest_available_age) : "-",
               s.paused ? "yes" : "no"});
    t.print(io.out);
    return kOk;
}

int cmd_jobs(const Argv& argv, Io io) {
    static const char* help =
        "usage: hopper jobs QUEUE [--state STATE] [--limit N]\n"
        "A queue's jobs, newest first.\n"
        "  --state STATE   available, scheduled, running, completed, dead or cancelled\n"
        "  --limit N       at most N jobs (1..10000, default 100)\n"
        "  --db CONNINFO  --json  --help\n";
    Args a;
    if (parse_or_help(argv, {"state", "limit"}, {}, help, io, a)) return kOk;
    want_positional(a, 1, 1, "QUEUE");
    std::optional<JobState> state;
    if (auto s = a.option("state")) {
        try {
            state = parse_job_state(*s);
        } catch (const std::invalid_argument&) {
            throw UsageError(fmt::format(
                "--state must be available, scheduled, running, completed, dead or cancelled, "
                "got \"{}\"",
                *s));
        }
    }
    int limit = static_cast<int>(a.integer("limit", 1, 10000).value_or(100));
    Client c = connect(a);
    auto jobs = c.jobs(a.positional[0], state, limit);
    if (a.flag("json")) {
        io.out << '[';
        for (size_t i = 0; i < jobs.size(); ++i) io.out << (i ? ", " : "") << job_json(jobs[i]);
        io.out << "]\n";
        return kOk;
    }
    Table t({"ID", "STATE", "KIND", "ATTEMPT", "PRIORITY", "RUN AT", "LAST ERROR"});
    for (const auto& j : jobs)
        t.add({std::to_string(j.id), std::string(to_string(j.state)), j.kind.value_or("-"),
               fmt::format("{}/{}", j.attempt, j.max_attempts), std::to_string(j.priority),
               time_text(j.run_at), j.last_error.value_or("")});
    t.print(io.out);
    return kOk;
}

int cmd_show(const Argv& argv, Io io) {
    static const char* help =
        "usage: hopper show ID\n"
        "Everything known about one job.\n"
        "  --db CONNINFO  --json  --help\n";
    Args a;
    if (parse_or_help(argv, {}, {}, help, io, a)) return kOk;
    want_positional(a, 1, 1, "one job ID");
    int64_t id = job_id_arg(a.positional[0]);
    Client c = connect(a);
    JobInfo j = c.job_status(id);
    if (a.flag("json")) {
        io.out << job_json(j) << '\n';
        return kOk;
    }
    auto row = [&](const char* k, const std::string& v) {
        // A value of several lines (an error with a stack trace) continues under its first line.
        std::string text = terminal_text(v, true);
        for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at + 1))
            text.insert(at + 1, 15, ' ');
        io.out << fmt::format("  {:<12} {}\n", k, text);
    };
    io.out << "job " << j.id << '\n';
    row("queue", j.queue);
    row("kind", j.kind.value_or("-"));
    row("state", std::string(to_string(j.state)));
    row("attempt", fmt::format("{} of {}", j.attempt, j.max_attempts));
    row("priority", std::to_string(j.priority));
    row("run at", time_text(j.run_at));
    row("created", time_text(j.created_at));
    if (j.started_at) row("started", time_text(*j.started_at));
    if (j.finished_at) row("finished", time_text(*j.finished_at));
    if (j.worker) row("worker", *j.worker);
    if (progress_known(j))
        row("progress", fmt::format("{:.0f}%{}", *j.progress * 100,
                                    j.progress_detail ? " " + *j.progress_detail : ""));
    if (j.last_error) row("last error", *j.last_error);
    // Every attempt's error, not only the last: why a job that is retried keeps failing.
    if (j.errors && *j.errors != "[]") row("errors", *j.errors);
    row("payload", j.payload);
    if (j.result) row("result", *j.result);
    return kOk;
}

namespace {

// retry and cancel: one job id in, one yes/no out; "no" is exit 5 (refused).
struct JobAction {
    const char* help;
    const char* json_key;
    bool (Client::*call)(int64_t);
    const char* done;     // fmt text with the id
    const char* refused;  // fmt text with the id
};

int run_job_action(const Argv& argv, Io io, const JobAction& action) {
    Args a;
    if (parse_or_help(argv, {}, {}, action.help, io, a)) return kOk;
    want_positional(a, 1, 1, "one job ID");
    int64_t id = job_id_arg(a.positional[0]);
    Client c = connect(a);
    bool ok = false;
    std::optional<std::string> reason;
    try {
        ok = (c.*action.call)(id);
    } catch (const Error& e) {
        // The server refuses rather than answering false when the job's state (55000) or a
        // dedup key held by another job (23505) does not allow it: the same answer, with a reason.
        if (e.sqlstate() != "55000" && e.sqlstate() != "23505") throw;
        reason = e.what();
        io.err << fmt::format("hopper: {}\n", terminal_text(e.what(), true));
        if (!e.hint().empty()) io.err << fmt::format("hint: {}\n", terminal_text(e.hint(), true));
    }
    if (a.flag("json"))
        io.out << fmt::format("{{\"id\": {}, \"{}\": {}{}}}\n", id, action.json_key,
                              ok ? "true" : "false",
                              reason ? ", \"reason\": " + json::quote(*reason) : "");
    else if (!reason)
        io.out << fmt::format(fmt::runtime(ok ? action.done : action.refused), id) << "\n";
    return ok ? kOk : kRefused;
}

}  // namespace

int cmd_retry(const Argv& argv, Io io) {
    static const JobAction retry{
        "usage: hopper retry ID\n"
        "Makes a dead or cancelled job available again (exit 5 for any other state).\n"
        "  --db CONNINFO  --json  --help\n",
        "retried", &Client::retry, "job {} is available again", "job {} was not retried"};
    return run_job_action(argv, io, retry);
}

int cmd_cancel(const Argv& argv, Io io) {
    static const JobAction cancel{
        "usage: hopper cancel ID\n"
        "Cancels a job that has not finished; a running job's worker is told to stop at its next\n"
        "heartbeat. Exit 5 when the job had already finished.\n"
        "  --db CONNINFO  --json  --help\n",
        "cancelled", &Client::cancel, "job {} cancelled",
        "job {} had already finished; nothing to cancel"};
    return run_job_action(argv, io, cancel);
}

int cmd_wait(const Argv& argv, Io io) {
    static const char* help =
        "usage: hopper wait ID [--timeout SECONDS]\n"
        "Waits until the job finishes. Exit 0 completed, 6 dead or cancelled, 4 timed out.\n"
        "  --timeout SECONDS   give up after this long (default 60)\n"
        "  --db CONNINFO  --json  --help\n";
    Args a;
    if (parse_or_help(argv, {"timeout"}, {}, help, io, a)) return kOk;
    want_positional(a, 1, 1, "one job ID");
    int64_t id = job_id_arg(a.positional[0]);
    double secs = a.seconds("timeout").value_or(60.0);
    Client c = connect(a);
    auto info = c.wait_for(id, Duration(static_cast<int64_t>(std::llround(secs * 1e6))));
    if (!info) {
        JobInfo now = c.job_status(id);
        if (a.flag("json"))
            io.out << job_json(now) << '\n';
        else
            io.out << fmt::format("job {} is still {} after {}s\n", id, to_string(now.state), secs);
        return kTimeout;
    }
    if (a.flag("json"))
        io.out << job_json(*info) << '\n';
    else
        io.out << fmt::format(
            "job {} {}{}\n", id, to_string(info->state),
            // An error from an earlier attempt says nothing about a job that completed later.
            info->state == JobState::Dead && info->last_error
                ? ": " + terminal_text(*info->last_error, true)
                : "");
    return info->state == JobState::Completed ? kOk : kJobFailed;
}

int cmd_reaper(const Argv& argv, Io io) {
    static const char* help =
        "usage: hopper reaper status\n"
        "The reaper processes serving this database: what they last did.\n"
        "Exit 7 when this database's hopper has no reaper_status() function.\n"
        "  --db CONNINFO  --json  --help\n";
    Args a;
    if (parse_or_help(argv, {}, {}, help, io, a)) return kOk;
    want_positional(a, 1, 1, "a subcommand: status");
    if (a.positional[0] != "status")
        throw UsageError(
            fmt::format("unknown reaper subcommand \"{}\" (expected status)", a.positional[0]));
    Client c = connect(a);
    Result r;
    try {
        r = c.exec("SELECT pid::text, database::text, mode::text, " HOPPER_UTC_ISO(
            "last_run") ", jobs_rescued::text, jobs_pruned::text FROM hopper.reaper_status()");
    } catch (const Error& e) {
        if (e.sqlstate() == "42883" || e.sqlstate() == "3F000") {
            io.err << "hopper: this database has no hopper.reaper_status(): the installed "
                      "hopper extension has no reaper (or is not installed here)\n";
            return kUnavailable;
        }
        throw;
    }
    auto last_run = [&](int i) { return r.opt_text(i, 3); };
    if (a.flag("json")) {
        io.out << '[';
        for (int i = 0; i < r.rows(); ++i)
            io.out << (i ? ", " : "")
                   << fmt::format(
                          "{{\"pid\": {}, \"database\": {}, \"mode\": {}, "
                          "\"last_run\": {}, \"jobs_rescued\": {}, \"jobs_pruned\": {}}}",
                          r.opt_text(i, 0).value_or("null"), opt_string_json(r.opt_text(i, 1)),
                          opt_string_json(r.opt_text(i, 2)), opt_string_json(last_run(i)),
                          r.opt_text(i, 4).value_or("null"), r.opt_text(i, 5).value_or("null"));
        io.out << "]\n";
        return kOk;
    }
    Table t({"PID", "DATABASE", "MODE", "LAST RUN", "RESCUED", "PRUNED"});
    for (int i = 0; i < r.rows(); ++i) {
        auto lr = last_run(i);
        t.add({std::string(r.text(i, 0)), std::string(r.text(i, 1)), std::string(r.text(i, 2)),
               lr ? iso_text(*lr) : "never", std::string(r.text(i, 4)), std::string(r.text(i, 5))});
    }
    t.print(io.out);
    return kOk;
}

int cmd_schedules(const Argv& argv, Io io) {
    static const char* help =
        "usage: hopper schedules\n"
        "The periodic jobs (hopper.queue_schedules()), soonest first: cron expression (UTC),\n"
        "queue, kind, next run and the tick the last job was pushed for.\n"
        "Exit 7 when this database's hopper has no periodic jobs.\n"
        "  --db CONNINFO  --json  --help\n";
    Args a;
    if (parse_or_help(argv, {}, {}, help, io, a)) return kOk;
    want_positional(a, 0, 0, "no arguments");
    Client c = connect(a);
    Result r;
    try {
        r = c.exec(
            "SELECT name, cron, queue, kind, " HOPPER_UTC_ISO("next_run_at") ", " HOPPER_UTC_ISO(
                "last_run_at") ", last_job_id::text, payload::text FROM hopper.queue_schedules()");
    } catch (const Error& e) {
        if (e.sqlstate() == "42883" || e.sqlstate() == "3F000") {
            io.err << "hopper: this database has no hopper.queue_schedules(): the installed "
                      "hopper extension has no periodic jobs (or is not installed here)\n";
            return kUnavailable;
        }
        throw;
    }
    auto time_at = [&](int i, int col) { return r.opt_text(i, col); };
    if (a.flag("json")) {
        io.out << '[';
        for (int i = 0; i < r.rows(); ++i)
            io.out << (i ? ", " : "")
                   << fmt::format(
                          "{{\"name\": {}, \"cron\": {}, \"queue\": {}, \"kind\": {}, "
                          "\"next_run_at\": {}, \"last_run_at\": {}, \"last_job_id\": {}, "
                          "\"payload\": {}}}",
                          opt_string_json(r.opt_text(i, 0)), opt_string_json(r.opt_text(i, 1)),
                          opt_string_json(r.opt_text(i, 2)), opt_string_json(r.opt_text(i, 3)),
                          opt_string_json(time_at(i, 4)), opt_string_json(time_at(i, 5)),
                          r.opt_text(i, 6).value_or("null"), opt_json(r.opt_text(i, 7)));
        io.out << "]\n";
        return kOk;
    }
    Table t({"NAME", "CRON", "QUEUE", "KIND", "NEXT RUN", "LAST RUN"});
    for (int i = 0; i < r.rows(); ++i) {
        auto last = time_at(i, 5);
        t.add({std::string(r.text(i, 0)), std::string(r.text(i, 1)), std::string(r.text(i, 2)),
               r.opt_text(i, 3).value_or("-"), iso_text(time_at(i, 4).value_or("-")),
               last ? iso_text(*last) : "never"});
    }
    t.print(io.out);
    return kOk;
}

}  // namespace hopper::cli
