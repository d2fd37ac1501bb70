// ffmpeg's `-progress pipe:1` output: blocks of key=value lines, each ended by progress=continue
// (or progress=end on the last one).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace transcode {

struct ProgressUpdate {
    std::optional<int64_t> out_time_us;  // position reached in the output; absent while "N/A"
    std::optional<double> speed;         // encoding speed relative to real time ("2.5x")
    std::optional<double> fps;
    // The last block: ffmpeg is stopping, having finished or failed (it says "end" either way).
    bool end = false;
};

class ProgressParser {
  public:
    // Feeds raw output (any chunking) and returns the blocks it completed.
    std::vector<ProgressUpdate> feed(std::string_view chunk);

  private:
    void line(std::string_view text, std::vector<ProgressUpdate>& done);

    std::string partial_;
    ProgressUpdate current_;
};

// The fraction of the input read, 0..1, by the position reached (also in the last block: an
// encode that failed halfway ends there); 0 while unknown (no position yet, or no duration).
double progress_fraction(const ProgressUpdate& update, double duration_seconds);

}  // namespace transcode
