// What an encode left in its staging directory, checked before it is published: ffmpeg's HLS
// muxer carries on past write errors (a full disk) and exits 0, and reads a truncated input to
// its end without complaint, so its exit status alone does not say the stream is whole.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "hls.hpp"

namespace transcode {

// The files are not a complete stream (empty or cut-short playlist, missing or empty segment):
// something went wrong while writing, which another attempt may not meet.
class IncompleteOutput : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

struct PlaylistDuration {
    std::string playlist;  // relative to the output directory
    double seconds = 0;    // the sum of its segments' #EXTINF
};

// Checks every playlist of `plan` in `dir` (the master playlist too, with a ladder): not empty,
// a finished VOD playlist (ending in #EXT-X-ENDLIST) and every segment it names present and not
// empty. Returns each media playlist's duration; throws IncompleteOutput naming the first fault.
std::vector<PlaylistDuration> check_stream(const std::filesystem::path& dir,
                                           const EncodePlan& plan);

// How much shorter than the probed duration a stream may be: encoders round the last segment,
// and a container's duration can exceed its streams' by a frame or two.
double duration_tolerance(double probed_seconds);

// The first playlist that lasts less than the input promised (within duration_tolerance), or
// nullptr: the input ended early (a truncated upload) although ffmpeg reported success. An input
// that promised nothing (probed_seconds 0: a streamed recording) is never short.
const PlaylistDuration* short_playlist(const std::vector<PlaylistDuration>& playlists,
                                       double probed_seconds);

// The longest of `playlists`, in seconds: what an input of unknown length turned out to last.
double longest(const std::vector<PlaylistDuration>& playlists);

}  // namespace transcode
