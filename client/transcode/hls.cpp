// HLS argument vectors. Keyframes are forced on segment boundaries so every segment is close to
// -hls_time and, in a ladder, the renditions' segments line up for bitrate switching.
#include "hls.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "stream_check.hpp"

namespace transcode {

namespace {

int even(double v) {
    return std::max(2, static_cast<int>(std::lround(v / 2.0)) * 2);
}

// Bitrate for a rung: ~5 Mb/s at 1080p, scaled by pixel count, within sane bounds.
int ladder_kbps(int width, int height) {
    double pixels = static_cast<double>(width) * height;
    double kbps = 5000.0 * pixels / (1920.0 * 1080.0);
    return std::clamp(static_cast<int>(std::lround(kbps / 50.0)) * 50, 300, 12000);
}

// The filter that holds the last frame (holds_last_frame), with a comma to chain the next one; it
// pads no longer than the whole input lasts, and -t ends the output at the input's length.
std::string hold_filter(const MediaInfo& source) {
    if (!holds_last_frame(source)) return "";
    return fmt::format("tpad=stop_mode=clone:stop_duration={:.6f},", source.duration);
}

void add_common_input(std::vector<std::string>& a, const EncodeSettings& s,
                      const std::string& input) {
    a = {s.ffmpeg,  "-hide_banner", "-nostdin", "-nostats", "-loglevel",
         "warning", "-progress",    "pipe:1",   "-y"};
    // The probe refused any other format already; the file may have been replaced since.
    for (auto& arg : input_restrictions()) a.push_back(std::move(arg));
    a.insert(a.end(), {"-i", file_url(input)});
}

void add_video_codec(std::vector<std::string>& a, const EncodeSettings& s) {
    a.insert(a.end(),
             {"-c:v", "libx264", "-preset", s.preset, "-pix_fmt", "yuv420p", "-force_key_frames",
              fmt::format("expr:gte(t,n_forced*{})", s.hls_time), "-sc_threshold", "0"});
    if (s.threads > 0) a.insert(a.end(), {"-threads", std::to_string(s.threads)});
}

void add_hls_muxer(std::vector<std::string>& a, const EncodeSettings& s, const MediaInfo& source) {
    // The output is made of frames at a constant rate, each held until the next: a sparse input
    // (a frame every ten minutes) gets its last frame held as long as the gap before it, past the
    // input's end. Not past what the input declares.
    if (source.duration > 0) a.insert(a.end(), {"-t", fmt::format("{:.6f}", source.duration)});
    a.insert(a.end(), {"-f", "hls", "-hls_time", std::to_string(s.hls_time), "-hls_playlist_type",
                       "vod", "-hls_flags", "independent_segments", "-hls_segment_type", "mpegts"});
}

}  // namespace

bool holds_last_frame(const MediaInfo& source) {
    // Within the tolerance of the output check, so a stream that would pass it is left as it is.
    return source.duration > 0 && source.video_duration > 0 &&
           source.video_duration < source.duration - duration_tolerance(source.duration);
}

std::vector<Rendition> plan_ladder(const MediaInfo& source, const std::vector<int>& heights) {
    // H.264 needs even sizes: an odd height is encoded one line shorter, and named for what it is,
    // so 241 and 240 are one rung (and 1 is none).
    std::vector<int> hs;
    for (int h : heights)
        if (h > 1 && h <= source.height) hs.push_back(h - h % 2);
    std::sort(hs.begin(), hs.end(), std::greater<int>());
    hs.erase(std::unique(hs.begin(), hs.end()), hs.end());
    if (hs.empty()) hs.push_back(source.height - source.height % 2);
    // Rungs have square pixels (setsar=1): an anamorphic source's are as wide as it is shown.
    const double shown_width = source.width * source.sample_aspect;
    std::vector<Rendition> out;
    for (int h : hs) {
        Rendition r;
        r.height = h;
        r.width = even(shown_width * h / source.height);
        r.name = fmt::format("{}p", h);
        r.video_kbps = ladder_kbps(r.width, r.height);
        r.playlist = r.name + "/index.m3u8";
        out.push_back(r);
    }
    return out;
}

EncodePlan build_encode(const EncodeSettings& s, const MediaInfo& source,
                        const std::string& input_path, const std::string& out_dir) {
    EncodePlan plan;
    auto& a = plan.argv;
    add_common_input(a, s, input_path);
    if (!s.ladder) {
        Rendition r;
        r.name = "source";
        // libx264 with 4:2:0 needs even dimensions; odd ones lose a line.
        r.width = source.width - source.width % 2;
        r.height = source.height - source.height % 2;
        r.playlist = "index.m3u8";
        plan.renditions.push_back(r);
        plan.playlist = r.playlist;
        a.insert(a.end(), {"-map", "0:v:0", "-vf",
                           hold_filter(source) + "scale=trunc(iw/2)*2:trunc(ih/2)*2"});
        if (source.has_audio) a.insert(a.end(), {"-map", "0:a:0"});
        add_video_codec(a, s);
        a.insert(a.end(), {"-crf", std::to_string(s.crf)});
        if (source.has_audio) a.insert(a.end(), {"-c:a", "aac", "-b:a", s.audio_bitrate});
        add_hls_muxer(a, s, source);
        a.insert(a.end(), {"-hls_segment_filename", out_dir + "/seg_%05d.ts",
                           out_dir + "/" + plan.playlist});
        return plan;
    }

    plan.renditions = plan_ladder(source, s.ladder_heights);
    plan.playlist = "master.m3u8";
    const auto& rs = plan.renditions;
    std::string graph = fmt::format("[0:v:0]{}split={}", hold_filter(source), rs.size());
    for (size_t i = 0; i < rs.size(); ++i) graph += fmt::format("[s{}]", i);
    for (size_t i = 0; i < rs.size(); ++i)
        graph += fmt::format(";[s{}]scale={}:{},setsar=1[v{}]", i, rs[i].width, rs[i].height, i);
    a.insert(a.end(), {"-filter_complex", graph});
    std::string stream_map;
    for (size_t i = 0; i < rs.size(); ++i) {
        a.insert(a.end(), {"-map", fmt::format("[v{}]", i)});
        if (source.has_audio) a.insert(a.end(), {"-map", "0:a:0"});
        if (!stream_map.empty()) stream_map += ' ';
        stream_map += source.has_audio ? fmt::format("v:{},a:{},name:{}", i, i, rs[i].name)
                                       : fmt::format("v:{},name:{}", i, rs[i].name);
    }
    add_video_codec(a, s);
    for (size_t i = 0; i < rs.size(); ++i) {
        int kbps = rs[i].video_kbps;
        a.insert(a.end(), {fmt::format("-b:v:{}", i), fmt::format("{}k", kbps),
                           fmt::format("-maxrate:v:{}", i), fmt::format("{}k", kbps * 107 / 100),
                           fmt::format("-bufsize:v:{}", i), fmt::format("{}k", kbps * 3 / 2)});
    }
    if (source.has_audio) a.insert(a.end(), {"-c:a", "aac", "-b:a", s.audio_bitrate});
    add_hls_muxer(a, s, source);
    a.insert(a.end(),
             {"-master_pl_name", plan.playlist, "-var_stream_map", stream_map,
              "-hls_segment_filename", out_dir + "/%v/seg_%05d.ts", out_dir + "/%v/index.m3u8"});
    return plan;
}

}  // namespace transcode
