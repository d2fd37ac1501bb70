// File names in what the transcoder writes: its log, and a row's and a job's error. An upload's
// name is whatever bytes its uploader chose, and a line break in it would start a line of the
// name's making, one that reads like the worker's own ("job 7 video 7: processed ..."). Errors
// keep their line breaks (ffmpeg's output is lines); the names in them never have any.
#pragma once

#include <algorithm>
#include <string>
#include <string_view>

namespace transcode {

// The name with its line breaks escaped as the terminal rule shows other control characters
// (\x0A, \x0D); the rest is left to that rule where the text is shown.
inline std::string shown_name(std::string_view name) {
    std::string out;
    out.reserve(name.size());
    for (char c : name) {
        if (c == '\n')
            out += "\\x0A";
        else if (c == '\r')
            out += "\\x0D";
        else
            out += c;
    }
    return out;
}

// Whether ffmpeg's logger may print the byte `c` of a name as `out`: it writes each control
// character other than \b \t \n \v \f \r as '?' (libavutil/log.c, sanitize()).
inline bool logged_as(char c, char out) {
    if (c == out) return true;
    const auto b = static_cast<unsigned char>(c);
    return out == '?' && b != 0 && (b < 0x08 || (b > 0x0D && b < 0x20));
}

// A program's output with a name in it shown with its line breaks escaped (ffprobe's "file:NAME:
// Invalid data found when processing input"), however the output comes chunked. The name is
// found as written and as ffmpeg's logger prints it, its other control characters as '?': a
// name that also holds one of those is otherwise not found, and its line breaks pass through.
// Only a name with a line break needs it; any other passes through as it is.
class NameMask {
  public:
    explicit NameMask(std::string_view name) {
        if (name.find_first_of("\r\n") != std::string_view::npos) name_ = name;
    }

    // What of the output so far cannot be the start of the name; the rest waits for more.
    std::string feed(std::string_view chunk) {
        if (name_.empty()) return std::string(chunk);
        held_.append(chunk);
        std::string out;
        size_t from = 0;  // held_ before it is given out
        for (size_t at = 0; at + name_.size() <= held_.size();) {
            if (!names_at(at, name_.size())) {
                ++at;
                continue;
            }
            out.append(held_, from, at - from);
            // As it was printed ('?' and all), only its line breaks escaped.
            out += shown_name(std::string_view(held_).substr(at, name_.size()));
            at = from = at + name_.size();
        }
        // The longest end of what is held that the name begins with.
        size_t keep = std::min(held_.size() - from, name_.size() - 1);
        while (keep > 0 && !names_at(held_.size() - keep, keep)) --keep;
        out.append(held_, from, held_.size() - keep - from);
        held_.erase(0, held_.size() - keep);
        return out;
    }

    // The output's end: what was held was not the name after all.
    std::string flush() {
        std::string out;
        out.swap(held_);
        return out;
    }

  private:
    // Whether held_ from `at` reads as the first `n` bytes of the name.
    bool names_at(size_t at, size_t n) const {
        for (size_t i = 0; i < n; ++i)
            if (!logged_as(name_[i], held_[at + i])) return false;
        return true;
    }

    std::string name_;
    std::string held_;
};

}  // namespace transcode
