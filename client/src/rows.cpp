// Row and parameter conversions; see rows.hpp.
#include "rows.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "encoded_chars.hpp"

namespace hopper::rows {

Param micros(std::optional<Duration> d) {
    if (!d) return std::nullopt;
    // HOPPER_INTERVAL_PARAM multiplies in float8, in which a count within 512 of int8's end rounds
    // to 2^63 microseconds, past an interval's range: Duration::max() (a "no timeout" that reaches
    // wait, lease, retry_in, extend or dedup_window) was refused as "interval out of range"
    // (22008) naming no argument. Held at the last float8 below 2^63 it is still ~292,000 years,
    // which the server refuses with its own message (22023: "wait must be at least 0 s and at
    // most 3600 s").
    constexpr int64_t limit = std::numeric_limits<int64_t>::max() - 1023;  // 2^63 - 1024
    return std::to_string(std::clamp<int64_t>(d->count(), -limit, limit));
}

Param micros(std::optional<TimePoint> t) {
    if (!t) return std::nullopt;
    return std::to_string(std::chrono::duration_cast<Duration>(t->time_since_epoch()).count());
}

Param real(double v) {
    if (std::fabs(v) < std::numeric_limits<float>::min()) return std::string("0");
    if (std::fabs(v) > std::numeric_limits<float>::max() && std::isfinite(v))
        return std::string(v > 0 ? "Infinity" : "-Infinity");
    return fmt::format("{}", v);
}

TimePoint time_at(const Result& r, int row, int col) {
    // The server's times reach the year 294276, the clock's nanoseconds 2262: a time past either
    // end is held at it rather than wrapped around to another.
    constexpr int64_t limit = std::chrono::duration_cast<Duration>(Clock::duration::max()).count();
    const int64_t us = r.int64(row, col);
    if (us >= limit) return TimePoint::max();
    if (us <= -limit) return TimePoint::min();
    return TimePoint(std::chrono::duration_cast<Clock::duration>(Duration(us)));
}

std::optional<TimePoint> opt_time_at(const Result& r, int row, int col) {
    if (r.is_null(row, col)) return std::nullopt;
    return time_at(r, row, col);
}

std::string array_literal(const std::vector<std::optional<std::string>>& values, int encoding) {
    std::string out = "{";
    for (size_t i = 0; i < values.size(); ++i) {
        if (i) out += ',';
        if (!values[i]) {
            out += "NULL";
            continue;
        }
        // Always quoted, so empty strings, spaces, commas and the word NULL survive as text.
        out += '"';
        const std::string& v = *values[i];
        for (size_t k = 0; k < v.size();) {
            const size_t n = internal::encoded_char_length(v, k, encoding);
            if (n == 1 && (v[k] == '"' || v[k] == '\\')) out += '\\';
            out.append(v, k, n);
            k += n;
        }
        out += '"';
    }
    out += '}';
    return out;
}

Param kinds_param(const std::vector<std::string>& kinds, int encoding) {
    if (kinds.empty()) return std::nullopt;
    return array_literal({kinds.begin(), kinds.end()}, encoding);
}

namespace {
// Columns 0-4, which leased and taken jobs share: id, queue, kind, payload, attempt.
Job read_job_head(const Result& r, int row) {
    Job j;
    j.id = r.int64(row, 0);
    j.queue = std::string(r.text(row, 1));
    j.kind = r.opt_text(row, 2);
    j.payload = std::string(r.text(row, 3));
    j.attempt = static_cast<int>(r.int64(row, 4));
    return j;
}
}  // namespace

Job read_job(const Result& r, int row) {
    Job j = read_job_head(r, row);
    j.lease_token = r.int64(row, 5);
    j.lease_until = time_at(r, row, 6);
    j.run_at = time_at(r, row, 7);
    j.created_at = time_at(r, row, 8);
    j.lease_left = Duration(r.int64(row, 9));
    return j;
}

Job read_taken_job(const Result& r, int row) {
    Job j = read_job_head(r, row);
    j.run_at = time_at(r, row, 5);
    j.created_at = time_at(r, row, 6);
    return j;
}

JobInfo read_job_info(const Result& r, int row) {
    JobInfo j;
    j.id = r.int64(row, 0);
    j.queue = std::string(r.text(row, 1));
    j.kind = r.opt_text(row, 2);
    j.state = parse_job_state(r.text(row, 3));
    j.attempt = static_cast<int>(r.int64(row, 4));
    j.max_attempts = static_cast<int>(r.int64(row, 5));
    j.priority = static_cast<int>(r.int64(row, 6));
    j.run_at = time_at(r, row, 7);
    j.created_at = time_at(r, row, 8);
    j.started_at = opt_time_at(r, row, 9);
    j.finished_at = opt_time_at(r, row, 10);
    j.worker = r.opt_text(row, 11);
    j.last_error = r.opt_text(row, 12);
    j.errors = r.opt_text(row, 13);
    j.result = r.opt_text(row, 14);
    if (!r.is_null(row, 15)) j.progress = r.float8(row, 15);
    j.progress_detail = r.opt_text(row, 16);
    j.payload = std::string(r.text(row, 17));
    return j;
}

QueueStat read_queue_stat(const Result& r, int row) {
    QueueStat s;
    s.queue = std::string(r.text(row, 0));
    s.available = r.int64(row, 1);
    s.scheduled = r.int64(row, 2);
    s.running = r.int64(row, 3);
    s.completed = r.int64(row, 4);
    s.dead = r.int64(row, 5);
    s.cancelled = r.int64(row, 6);
    if (!r.is_null(row, 7)) s.oldest_available_age = Duration(r.int64(row, 7));
    s.paused = r.boolean(row, 8);
    return s;
}

}  // namespace hopper::rows
