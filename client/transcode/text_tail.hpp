// The last lines of a stream of text (ffmpeg's stderr): what a failure report needs, bounded
// however much the encoder prints.
#pragma once

#include <deque>
#include <string>
#include <string_view>

namespace transcode {

class TextTail {
  public:
    explicit TextTail(size_t max_lines = 20, size_t max_line_length = 400)
        : max_lines_(max_lines), max_line_length_(max_line_length) {}

    void append(std::string_view chunk) {
        for (char c : chunk) {
            if (c == '\n' || c == '\r') {
                flush();
            } else if (partial_.size() < max_line_length_) {
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
            out += partial_;
        }
        return out;
    }

  private:
    void flush() {
        if (partial_.empty()) return;
        lines_.push_back(std::move(partial_));
        partial_.clear();
        if (lines_.size() > max_lines_) lines_.pop_front();
    }

    size_t max_lines_;
    size_t max_line_length_;
    std::deque<std::string> lines_;
    std::string partial_;
};

}  // namespace transcode
