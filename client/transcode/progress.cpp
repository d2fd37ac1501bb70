// ProgressParser: line splitting across chunks and the few keys a progress bar needs.
#include "progress.hpp"

#include <algorithm>
#include <cstdlib>

namespace transcode {

namespace {

std::optional<double> parse_double(std::string_view s) {
    std::string text(s);
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (text.empty() || end == text.c_str()) return std::nullopt;
    return v;
}

std::optional<int64_t> parse_int64(std::string_view s) {
    std::string text(s);
    char* end = nullptr;
    long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || end != text.c_str() + text.size()) return std::nullopt;
    return static_cast<int64_t>(v);
}

}  // namespace

std::vector<ProgressUpdate> ProgressParser::feed(std::string_view chunk) {
    std::vector<ProgressUpdate> done;
    partial_.append(chunk);
    size_t start = 0;
    while (true) {
        size_t nl = partial_.find('\n', start);
        if (nl == std::string::npos) break;
        std::string_view text(partial_.data() + start, nl - start);
        if (!text.empty() && text.back() == '\r') text.remove_suffix(1);
        line(text, done);
        start = nl + 1;
    }
    partial_.erase(0, start);
    return done;
}

void ProgressParser::line(std::string_view text, std::vector<ProgressUpdate>& done) {
    auto eq = text.find('=');
    if (eq == std::string_view::npos) return;
    std::string_view key = text.substr(0, eq);
    std::string_view value = text.substr(eq + 1);
    // ffmpeg 5.1 prints out_time_ms with the same microsecond value as out_time_us.
    if (key == "out_time_us" || key == "out_time_ms") {
        if (auto v = parse_int64(value); v && *v >= 0) current_.out_time_us = v;
    } else if (key == "speed") {
        if (!value.empty() && value.back() == 'x') value.remove_suffix(1);
        current_.speed = parse_double(value);
    } else if (key == "fps") {
        current_.fps = parse_double(value);
    } else if (key == "progress") {
        current_.end = value == "end";
        done.push_back(current_);
        current_ = ProgressUpdate{};
    }
}

double progress_fraction(const ProgressUpdate& update, double duration_seconds) {
    if (!update.out_time_us || duration_seconds <= 0) return 0.0;
    double f = static_cast<double>(*update.out_time_us) / 1e6 / duration_seconds;
    return std::clamp(f, 0.0, 1.0);
}

}  // namespace transcode
