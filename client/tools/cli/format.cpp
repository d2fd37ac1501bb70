// Output formatting; see format.hpp.
#include "format.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "hopper/json.hpp"

namespace hopper::cli {

namespace {
std::tm utc(TimePoint t) {
    // The second the time falls in: to_time_t rounds toward zero, which put a time before 1970
    // with a fraction in the second after it (and time_json adds the fraction from below).
    std::time_t s = std::chrono::floor<std::chrono::seconds>(t.time_since_epoch()).count();
    std::tm tm{};
    gmtime_r(&s, &tm);
    return tm;
}
}  // namespace

// The library reads a time past either end of the clock (2262, 1677), infinity included, as the
// clock's end: printing that end as a date would name a day the job was never set to.
std::string time_text(TimePoint t) {
    if (t == TimePoint::max()) return fmt::format("after {:%Y-%m-%d}", utc(t));
    if (t == TimePoint::min()) return fmt::format("before {:%Y-%m-%d}", utc(t));
    return fmt::format("{:%Y-%m-%d %H:%M:%S} UTC", utc(t));
}

std::string time_json(const std::optional<TimePoint>& t) {
    if (!t) return "null";
    // As PostgreSQL's own JSON writes an infinite time: a string a script can test for.
    if (*t == TimePoint::max()) return "\"infinity\"";
    if (*t == TimePoint::min()) return "\"-infinity\"";
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(t->time_since_epoch()).count();
    long long frac = ((us % 1000000) + 1000000) % 1000000;
    return fmt::format("\"{:%Y-%m-%dT%H:%M:%S}.{:06d}Z\"", utc(*t), frac);
}

std::string age_text(Duration d) {
    long long ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
    if (ms < 0) return "-" + age_text(-d);
    if (ms < 1000) return fmt::format("{}ms", ms);
    long long s = ms / 1000;
    if (s < 60) return fmt::format("{}s", s);
    if (s < 3600) return fmt::format("{}m{:02d}s", s / 60, s % 60);
    if (s < 86400) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
    return fmt::format("{}d{:02d}h", s / 86400, (s % 86400) / 3600);
}

std::string opt_json(const std::optional<std::string>& raw) {
    return raw ? *raw : "null";
}

std::string opt_string_json(const std::optional<std::string>& text) {
    return text ? json::quote(*text) : "null";
}

// A progress set by hand to NaN or infinity (queue_progress refuses them) is no number JSON has:
// printed, it made the whole document unreadable.
bool progress_known(const JobInfo& j) {
    return j.progress && std::isfinite(*j.progress);
}

std::string job_json(const JobInfo& j) {
    return fmt::format(
        "{{\"id\": {}, \"queue\": {}, \"kind\": {}, \"state\": \"{}\", \"attempt\": {}, "
        "\"max_attempts\": {}, \"priority\": {}, \"run_at\": {}, \"created_at\": {}, "
        "\"started_at\": {}, \"finished_at\": {}, \"worker\": {}, \"last_error\": {}, "
        "\"errors\": {}, \"result\": {}, \"progress\": {}, \"progress_detail\": {}, "
        "\"payload\": {}}}",
        j.id, json::quote(j.queue), opt_string_json(j.kind), to_string(j.state), j.attempt,
        j.max_attempts, j.priority, time_json(j.run_at), time_json(j.created_at),
        time_json(j.started_at), time_json(j.finished_at), opt_string_json(j.worker),
        opt_string_json(j.last_error), opt_json(j.errors), opt_json(j.result),
        progress_known(j) ? fmt::format("{}", *j.progress) : "null", opt_json(j.progress_detail),
        j.payload);
}

std::string stat_json(const QueueStat& s) {
    std::string age = "null";
    if (s.oldest_available_age)
        age = fmt::format("{:.3f}", static_cast<double>(s.oldest_available_age->count()) / 1e6);
    return fmt::format(
        "{{\"queue\": {}, \"available\": {}, \"scheduled\": {}, \"running\": {}, "
        "\"completed\": {}, \"dead\": {}, \"cancelled\": {}, \"oldest_available_age_s\": {}, "
        "\"paused\": {}}}",
        json::quote(s.queue), s.available, s.scheduled, s.running, s.completed, s.dead, s.cancelled,
        age, s.paused ? "true" : "false");
}

namespace {
// Columns line up by characters, not bytes: "é" takes two bytes and one column. (Wide characters,
// such as CJK or emoji, still take two columns each.)
size_t columns(const std::string& s) {
    size_t n = 0;
    for (char ch : s)
        if ((static_cast<unsigned char>(ch) & 0xC0) != 0x80) ++n;
    return n;
}
}  // namespace

void Table::print(std::ostream& out) const {
    std::vector<size_t> width(header_.size(), 0);
    auto measure = [&](const std::vector<std::string>& row) {
        for (size_t i = 0; i < row.size() && i < width.size(); ++i)
            width[i] = std::max(width[i], columns(row[i]));
    };
    measure(header_);
    for (const auto& r : rows_) measure(r);
    auto line = [&](const std::vector<std::string>& row) {
        std::string s;
        for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
            if (i + 1 == row.size()) {
                s += row[i];
            } else {
                s += row[i];
                s.append(width[i] - columns(row[i]) + 2, ' ');
            }
        }
        out << s << '\n';
    };
    line(header_);
    for (const auto& r : rows_) line(r);
}

}  // namespace hopper::cli
