// hopper watch: a refreshing view of queue depth, throughput and running jobs.
#include <chrono>
#include <cmath>
#include <map>
#include <thread>

#include <fmt/format.h>

#include "args.hpp"
#include "commands.hpp"
#include "format.hpp"
#include "hopper/client.hpp"
#include "hopper/json.hpp"

namespace hopper::cli {

namespace {

constexpr int kRunningShown = 10;  // per queue; the view is a summary, `hopper jobs` has the rest

struct Sample {
    std::chrono::steady_clock::time_point at;
    int64_t completed;
    int64_t failed;  // dead + cancelled
};

std::string rate(const std::optional<double>& r) {
    return r ? fmt::format("{:.1f}", *r) : std::string("-");
}

// A start read as the clock's end (a time past 2262 or before 1677, infinity included) is no
// time to count from: the difference would be meaningless, or overflow the nanoseconds.
std::string running_for(TimePoint now, const std::optional<TimePoint>& started_at) {
    if (!started_at || *started_at == TimePoint::max() || *started_at == TimePoint::min())
        return "-";
    return age_text(std::chrono::duration_cast<Duration>(now - *started_at));
}

}  // namespace

int cmd_watch(const Argv& argv, Io io) {
    static const char* help =
        "usage: hopper watch [QUEUE] [--interval SECONDS] [--once] [--count N]\n"
        "A live view of queue depth, completion rates and running jobs, refreshed in place.\n"
        "  --interval SECONDS  refresh period (default 2)\n"
        "  --once              print one snapshot without clearing the screen (rates need two)\n"
        "  --count N           stop after N refreshes\n"
        "  --db CONNINFO  --json (one JSON object per refresh)  --help\n";
    Args a = parse(argv, {"interval", "count", "db"}, {"once", "json", "help"});
    if (a.flag("help")) {
        io.out << help;
        return kOk;
    }
    if (a.positional.size() > 1) throw UsageError("expected at most one QUEUE");
    double interval = a.seconds("interval").value_or(2.0);
    if (interval < 0.1) throw UsageError("--interval must be at least 0.1 seconds");
    long long count = a.flag("once") ? 1 : a.integer("count", 1, 1000000000).value_or(0);
    bool json = a.flag("json");
    bool clear = !json && !a.flag("once");
    std::optional<std::string> queue;
    if (!a.positional.empty()) queue = a.positional[0];

    Client c = connect(a);
    std::map<std::string, Sample> previous;
    for (long long n = 1; count == 0 || n <= count; ++n) {
        if (n > 1)
            std::this_thread::sleep_for(std::chrono::milliseconds(std::llround(interval * 1000)));
        auto now = std::chrono::steady_clock::now();
        auto stats = c.stats(queue);
        if (queue && stats.empty()) throw Error("P0002", "queue \"" + *queue + "\" does not exist");
        std::vector<JobInfo> running;
        for (const auto& s : stats)
            if (s.running > 0)
                for (auto& j : c.jobs(s.queue, JobState::Running, kRunningShown))
                    running.push_back(std::move(j));
        std::map<std::string, std::pair<std::optional<double>, std::optional<double>>> rates;
        for (const auto& s : stats) {
            Sample cur{now, s.completed, s.dead + s.cancelled};
            auto it = previous.find(s.queue);
            if (it != previous.end()) {
                double secs = std::chrono::duration<double>(now - it->second.at).count();
                if (secs > 0)
                    rates[s.queue] = {(cur.completed - it->second.completed) / secs,
                                      (cur.failed - it->second.failed) / secs};
            }
            previous[s.queue] = cur;
        }
        auto wall = server_now(c);

        if (json) {
            std::string out = fmt::format("{{\"time\": {}, \"queues\": [", time_json(wall));
            for (size_t i = 0; i < stats.size(); ++i) {
                auto r = rates[stats[i].queue];
                std::string st = stat_json(stats[i]);
                st.pop_back();  // reopen the object to add the rates
                out += fmt::format("{}{}, \"completed_per_s\": {}, \"failed_per_s\": {}}}",
                                   i ? ", " : "", st,
                                   r.first ? fmt::format("{:.3f}", *r.first) : "null",
                                   r.second ? fmt::format("{:.3f}", *r.second) : "null");
            }
            out += "], \"running\": [";
            for (size_t i = 0; i < running.size(); ++i)
                out += (i ? ", " : "") + job_json(running[i]);
            io.out << out << "]}\n" << std::flush;
            continue;
        }
        if (clear) io.out << "\033[H\033[2J";
        io.out << fmt::format("hopper watch  {}{}\n\n", time_text(wall),
                              clear ? fmt::format("  (every {}s, Ctrl-C to quit)", interval) : "");
        Table t({"QUEUE", "AVAILABLE", "SCHEDULED", "RUNNING", "COMPLETED", "DEAD", "CANCELLED",
                 "DONE/S", "FAILED/S", "OLDEST", "PAUSED"});
        for (const auto& s : stats) {
            auto r = rates[s.queue];
            t.add({s.queue, std::to_string(s.available), std::to_string(s.scheduled),
                   std::to_string(s.running), std::to_string(s.completed), std::to_string(s.dead),
                   std::to_string(s.cancelled), rate(r.first), rate(r.second),
                   s.oldest_available_age ? age_text(*s.oldest_available_age) : "-",
                   s.paused ? "yes" : "no"});
        }
        t.print(io.out);
        io.out << "\nrunning jobs: " << (running.empty() ? "none" : "") << '\n';
        if (!running.empty()) {
            Table rt({"ID", "QUEUE", "KIND", "ATTEMPT", "PROGRESS", "RUNNING FOR", "WORKER"});
            for (const auto& j : running)
                rt.add({std::to_string(j.id), j.queue, j.kind.value_or("-"),
                        fmt::format("{}/{}", j.attempt, j.max_attempts),
                        progress_known(j) ? fmt::format("{:.0f}%", *j.progress * 100) : "-",
                        running_for(wall, j.started_at), j.worker.value_or("-")});
            rt.print(io.out);
        }
        io.out << std::flush;
    }
    return kOk;
}

}  // namespace hopper::cli
