// What ffprobe says about an input file, and the checks that make a file worth encoding.
#pragma once

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace transcode {

struct MediaInfo {
    // Seconds; 0 when unknown: a recording streamed as it was made (a browser's MediaRecorder
    // upload, WebM) never went back to write its length. The encode then finds it out.
    double duration = 0;
    // The picture as a player shows it: a phone stores a portrait video landscape, with a rotation
    // to apply, and ffmpeg decodes it turned upright, so its width and height trade places.
    int width = 0;
    int height = 0;
    // A pixel's width over its height (of the upright picture): 1 but for anamorphic sources, such
    // as DVD's 720x480 shown 16:9 (32:27), whose pixels are wider than tall.
    double sample_aspect = 1;
    bool has_audio = false;
    // Seconds of the video stream alone, 0 when unknown: the stream's own length (MP4, MOV), or
    // the DURATION tag of a Matroska track. A still frame muxed over a soundtrack lasts one frame
    // (0.04 s) of a clip of minutes.
    double video_duration = 0;

    // The width a player shows, in square pixels: 720x480 at 32:27 is 853 wide.
    int display_width() const;
};

// The input can never be encoded (missing, unreadable, not a video): retrying will not help.
class UnusableInput : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

// Parses `ffprobe -of compact` output (stream|key=value|... and format|duration=...) for `path`.
// A stream's rotation is its display matrix's (side_data|rotation=-90, what ffmpeg reads now), or
// the legacy tag:rotate=90 of older demuxers. The duration is the container's, else the video
// stream's; the video stream's own length is its duration, or its DURATION tag (Matroska gives
// every track the file's length, and the real one in that tag). Throws UnusableInput when there is
// no video stream, it is a still picture (an image format, one frame without audio, or an image
// codec with no duration), its picture is under 2 pixels wide or tall, or its format is not an
// accepted container.
MediaInfo parse_probe_output(std::string_view text, const std::string& path);

// Checks the file exists and is readable, then runs ffprobe on it. `on_tick` is called while
// ffprobe runs and may throw to abandon it (the child is killed on the way out).
MediaInfo probe(const std::string& ffprobe, const std::string& path,
                const std::function<void()>& on_tick);

// The input argument for ffmpeg/ffprobe: the file protocol only, so a path can never be taken for
// a URL, another protocol or an option.
std::string file_url(const std::string& path);

// What ffmpeg and ffprobe are told before the input: read it with the file protocol only, and only
// as one of the video containers below. The contents choose the demuxer otherwise, and some read
// other files: an HLS playlist or an ffconcat list names files anywhere on the machine, an image
// name with %d reads a numbered sequence. Those are refused before they open anything.
std::vector<std::string> input_restrictions();

// Whether ffprobe's format_name ("mov,mp4,m4a,3gp,3g2,mj2") is one of the accepted containers.
bool accepted_format(std::string_view format_name);

}  // namespace transcode
