// The last lines of a stream of text (ffmpeg's stderr): what a failure report needs, bounded
// however much the encoder prints, and valid UTF-8 whatever it prints (file names come in any
// encoding).
#pragma once

#include <deque>
#include <string>
#include <string_view>

#include "hopper/utf8.hpp"

namespace transcode {

class TextTail {
  public:
    explicit TextTail(size_t max_lines = 20, size_t max_line_length = 400)
        : max_lines_(max_lines), max_line_length_(max_line_length) {}

    void append(std::string_view chunk) {
        for (char c : chunk) {
            if (c == '\n' || c == '\r') {
                flush();
            } else if (partial_.size() < max_line_length_ + kLongestChar - 1) {
                // A few bytes past the limit, so the character that crosses it is seen whole
                // and dropped, not taken for a broken one.
                partial_ += c;
            }
        }
    }

    // The kept lines, oldest first, joined with newlines (an unfinished last line included).
    std::string text() const {
        std::string out;
        for (const auto& l : lines_) {
            if (!out.empty()) out += '\n';
            out += l;
        }
        if (!partial_.empty()) {
            if (!out.empty()) out += '\n';
            out += hopper::valid_utf8(partial_, max_line_length_);
        }
        return out;
    }

  private:
    void flush() {
        if (partial_.empty()) return;
        lines_.push_back(hopper::valid_utf8(partial_, max_line_length_));
        partial_.clear();
        if (lines_.size() > max_lines_) lines_.pop_front();
    }

    static constexpr size_t kLongestChar = 4;  // bytes of one UTF-8 character

    size_t max_lines_;
    size_t max_line_length_;
    std::deque<std::string> lines_;
    std::string partial_;
};

}  // namespace transcode
