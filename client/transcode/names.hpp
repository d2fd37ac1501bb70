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

// A program's output with a name in it replaced by its shown_name() (ffprobe's "file:NAME:
// Invalid data found when processing input"), however the output comes chunked. Only a name with
// a line break needs it; any other passes through as it is.
class NameMask {
  public:
    explicit NameMask(std::string_view name) {
        if (name.find_first_of("\r\n") != std::string_view::npos) {
            name_ = name;
            shown_ = shown_name(name);
        }
    }

    // What of the output so far cannot be the start of the name; the rest waits for more.
    std::string feed(std::string_view chunk) {
        if (name_.empty()) return std::string(chunk);
        held_.append(chunk);
        std::string out;
        for (size_t at; (at = held_.find(name_)) != std::string::npos;) {
            out.append(held_, 0, at);
            out += shown_;
            held_.erase(0, at + name_.size());
        }
        // The longest end of what is held that the name begins with.
        size_t keep = std::min(held_.size(), name_.size() - 1);
        while (keep > 0 && held_.compare(held_.size() - keep, keep, name_, 0, keep) != 0) --keep;
        out.append(held_, 0, held_.size() - keep);
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
    std::string name_;
    std::string shown_;
    std::string held_;
};

}  // namespace transcode
