// Progress and outcome lines for the operator, one whole line at a time from any thread. They
// carry what jobs bring (file names, ffmpeg's output, server messages): control characters in
// them are shown as escapes, never sent to the terminal.
#pragma once

#include <cstdio>
#include <mutex>
#include <string>

#include "terminal_text.hpp"

namespace transcode {

class Log {
  public:
    explicit Log(bool quiet = false) : quiet_(quiet) {}

    // Routine news (progress, success); silenced by --quiet.
    void info(const std::string& line) {
        if (!quiet_) write(stdout, line);
    }
    // Failures and warnings; always shown.
    void error(const std::string& line) { write(stderr, line); }

  private:
    void write(std::FILE* f, const std::string& line) {
        std::lock_guard<std::mutex> lock(mutex_);
        std::fprintf(f, "%s\n", hopper::text::terminal_text(line, true).c_str());
        std::fflush(f);
    }

    bool quiet_;
    std::mutex mutex_;
};

}  // namespace transcode
