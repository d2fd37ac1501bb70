// The ffmpeg command lines that turn one input into HLS: a single rendition (the original recipe)
// or an adaptive ladder with a master playlist.
#pragma once

#include <string>
#include <vector>

#include "probe.hpp"

namespace transcode {

struct EncodeSettings {
    std::string ffmpeg = "ffmpeg";
    int hls_time = 10;                // target segment length, seconds
    std::string preset = "veryfast";  // libx264 speed/size trade-off
    int crf = 23;                     // single rendition quality (libx264 scale)
    std::string audio_bitrate = "128k";
    int threads = 0;  // ffmpeg's -threads; 0 lets ffmpeg decide
    bool ladder = false;
    std::vector<int> ladder_heights = {1080, 720, 480};
};

struct Rendition {
    std::string name;  // "720p"; also its directory in a ladder
    int width = 0;
    int height = 0;
    int video_kbps = 0;    // 0: quality-based (single rendition)
    std::string playlist;  // relative to the output directory
};

struct EncodePlan {
    std::vector<std::string> argv;
    std::string playlist;  // what a player opens, relative to the output directory
    std::vector<Rendition> renditions;
};

// The ladder's rungs for a source: configured heights at or below the source's (never upscaled),
// highest first; a source smaller than every rung gets one rendition at its own size.
std::vector<Rendition> plan_ladder(const MediaInfo& source, const std::vector<int>& heights);

// Whether the video stream ends well before the length the encode is capped at (a still frame over
// a soundtrack, a picture track shorter than its sound): its last frame is then held to the end,
// where the stream would otherwise stop with the picture and be taken for a cut-short upload. Only
// when the probe knows both lengths: an upload cut short ends its picture and sound together and
// declares the length it was meant to have, which the check of the output must still find short.
bool holds_last_frame(const MediaInfo& source);

// The ffmpeg argument vector writing HLS into `out_dir` (which must exist), reporting progress on
// stdout (-progress pipe:1).
EncodePlan build_encode(const EncodeSettings& settings, const MediaInfo& source,
                        const std::string& input_path, const std::string& out_dir);

}  // namespace transcode
