// probe: file checks with precise messages, then ffprobe's compact output.
#include "probe.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "names.hpp"
#include "process.hpp"
#include "text_tail.hpp"

namespace transcode {

namespace {

using Fields = std::map<std::string, std::string, std::less<>>;

std::vector<std::string_view> split(std::string_view s, char sep) {
    std::vector<std::string_view> parts;
    while (true) {
        auto pos = s.find(sep);
        parts.push_back(s.substr(0, pos));
        if (pos == std::string_view::npos) return parts;
        s.remove_prefix(pos + 1);
    }
}

int to_int(const Fields& f, const char* key) {
    auto it = f.find(key);
    return it == f.end() ? 0 : std::atoi(it->second.c_str());
}

// A quarter turn either way (90, -90, 270...) stands the picture on its side.
bool quarter_turned(const Fields& f) {
    auto it = f.find("rotation");
    if (it == f.end()) it = f.find("tag:rotate");
    if (it == f.end()) return false;
    double degrees = std::strtod(it->second.c_str(), nullptr);
    if (!std::isfinite(degrees)) return false;
    long turns = std::lround(degrees / 90.0);
    return turns % 2 != 0;
}

// "32:27"; 1 when unknown ("0:1", "N/A") or beyond any real source's.
double sample_aspect(const Fields& f) {
    auto it = f.find("sample_aspect_ratio");
    if (it == f.end()) return 1;
    int num = 0, den = 0;
    if (std::sscanf(it->second.c_str(), "%d:%d", &num, &den) != 2 || num <= 0 || den <= 0) return 1;
    double sar = static_cast<double>(num) / den;
    return sar >= 0.01 && sar <= 100 ? sar : 1;
}

// Seconds, or 0 for "N/A", a missing key or nonsense.
double seconds_of(const Fields& f) {
    auto it = f.find("duration");
    if (it == f.end()) return 0;
    double d = std::strtod(it->second.c_str(), nullptr);
    return std::isfinite(d) && d > 0 ? d : 0;
}

// A Matroska track's tag:DURATION, "00:00:00.063000000" (hours may exceed 24); 0 when absent or
// not of that shape.
double tag_seconds(const Fields& f) {
    auto it = f.find("tag:DURATION");
    if (it == f.end()) return 0;
    unsigned long hours = 0, minutes = 0;
    double secs = 0;
    int used = 0;
    if (std::sscanf(it->second.c_str(), "%lu:%lu:%lf%n", &hours, &minutes, &secs, &used) != 3 ||
        static_cast<size_t>(used) != it->second.size() || minutes >= 60 || !(secs >= 0) ||
        secs >= 60 || hours > 1000000)
        return 0;
    double d = static_cast<double>(hours) * 3600 + static_cast<double>(minutes) * 60 + secs;
    return std::isfinite(d) && d > 0 ? d : 0;
}

// Codecs of single pictures: read from an image file, they carry no duration. (Not mjpeg: a
// camera's motion JPEG is a video; a JPEG file is known by its image demuxer.)
bool picture_codec(const std::string& codec) {
    static const char* const kCodecs[] = {
        "png",     "apng", "jpeg2000", "jpegls",  "jpegxl",    "bmp",    "tiff", "webp",
        "gif",     "ppm",  "pgm",      "pgmyuv",  "pbm",       "pam",    "qoi",  "sgi",
        "targa",   "pcx",  "xbm",      "xwd",     "xpm",       "dds",    "exr",  "hdr",
        "sunrast", "dpx",  "psd",      "photocd", "alias_pix", "pictor", "svg"};
    for (const char* c : kCodecs)
        if (codec == c) return true;
    return false;
}

// ffmpeg's demuxers of image files: image2 (by file name), and png_pipe, jpeg_pipe... (by content).
bool picture_format(const std::string& format) {
    const std::string pipe = "_pipe";
    return format == "image2" ||
           (format.size() > pipe.size() &&
            format.compare(format.size() - pipe.size(), pipe.size(), pipe) == 0);
}

// Demuxers of video containers that read the one file they are given and nothing else, by
// ffmpeg's short names (one name of a demuxer that has several, "mov,mp4,m4a,3gp,3g2,mj2", stands
// for them all). Left out: hls, concat, dash, imf and image2, which open files a playlist, list or
// pattern names; sdp and rtp, which open network ports; audio-only and image formats, which are
// no video. gif is in for animated GIFs (a single picture is refused as a still).
constexpr const char* kContainers[] = {"mov",  "matroska", "mpegts", "mpeg",      "avi", "flv",
                                       "asf",  "ogg",      "mxf",    "dv",        "nut", "ivf",
                                       "h264", "hevc",     "m4v",    "mpegvideo", "gif"};

std::string refused_format(const std::string& path, const std::string& format) {
    // image2 is chosen by the name: "a%d.jpg" would read a1.jpg, a2.jpg... as frames.
    if (format == "image2")
        return fmt::format("{}: not a video (a still image, or a numbered sequence of them: {})",
                           path, format);
    if (picture_format(format))
        return fmt::format("{}: not a video (a still image, {})", path, format);
    return fmt::format(
        "{}: not a video file (read as {}, which is not one of the accepted video containers; a "
        "playlist or a list of other files is never read)",
        path, format);
}

// The demuxer ffprobe found and refused, from "[hls @ 0x55d3...] Format not on whitelist '...'":
// ffmpeg names a format context's messages after its demuxer.
std::optional<std::string> whitelist_refusal(const std::string& err) {
    auto at = err.find("] Format not on whitelist");
    if (at == std::string::npos) return std::nullopt;
    auto start = err.rfind('\n', at);
    start = start == std::string::npos ? 0 : start + 1;
    auto name_end = err.find(" @ ", start);
    if (err.compare(start, 1, "[") != 0 || name_end == std::string::npos || name_end > at)
        return std::nullopt;
    return err.substr(start + 1, name_end - start - 1);
}

}  // namespace

int MediaInfo::display_width() const {
    return static_cast<int>(std::lround(width * sample_aspect));
}

std::string file_url(const std::string& path) {
    return "file:" + path;
}

std::vector<std::string> input_restrictions() {
    std::string list;
    for (const char* c : kContainers) {
        if (!list.empty()) list += ',';
        list += c;
    }
    return {"-protocol_whitelist", "file", "-format_whitelist", list};
}

bool accepted_format(std::string_view format_name) {
    for (std::string_view name : split(format_name, ','))
        for (const char* c : kContainers)
            if (name == c) return true;
    return false;
}

MediaInfo parse_probe_output(std::string_view text, const std::string& path) {
    const std::string name = shown_name(path);
    MediaInfo info;
    bool video = false;
    double stream_duration = 0;
    std::string codec, frames, format_name;
    for (std::string_view line : split(text, '\n')) {
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        auto parts = split(line, '|');
        if (parts.size() < 2) continue;
        Fields f;
        for (size_t i = 1; i < parts.size(); ++i) {
            auto eq = parts[i].find('=');
            if (eq == std::string_view::npos) continue;
            f.emplace(std::string(parts[i].substr(0, eq)), std::string(parts[i].substr(eq + 1)));
        }
        if (parts[0] == "stream") {
            auto type = f.find("codec_type");
            if (type == f.end()) continue;
            // Cover art in an audio file is a "video" stream of one picture: not a video.
            bool cover = to_int(f, "disposition:attached_pic") != 0;
            if (type->second == "video" && !cover && !video) {
                video = true;
                info.width = to_int(f, "width");
                info.height = to_int(f, "height");
                info.sample_aspect = sample_aspect(f);
                stream_duration = seconds_of(f);
                // Matroska reports each track as long as the file; its tag has the track's own.
                info.video_duration = tag_seconds(f);
                if (info.video_duration <= 0) info.video_duration = stream_duration;
                if (auto c = f.find("codec_name"); c != f.end()) codec = c->second;
                if (auto n = f.find("nb_frames"); n != f.end()) frames = n->second;
                if (quarter_turned(f)) {
                    std::swap(info.width, info.height);
                    info.sample_aspect = 1 / info.sample_aspect;
                }
            } else if (type->second == "audio") {
                info.has_audio = true;
            }
        } else if (parts[0] == "format") {
            info.duration = seconds_of(f);
            if (auto n = f.find("format_name"); n != f.end()) format_name = n->second;
        }
    }
    // ffprobe refuses other formats itself (input_restrictions()); this holds for any ffprobe.
    if (!format_name.empty() && !accepted_format(format_name))
        throw UnusableInput(refused_format(name, format_name));
    if (!video || info.width <= 0 || info.height <= 0)
        throw UnusableInput(fmt::format("{}: not a video (no video stream found)", name));
    // H.264 in 4:2:0 needs even sizes: a line or column of one pixel has no even size to keep.
    if (info.width < 2 || info.height < 2)
        throw UnusableInput(
            fmt::format("{}: picture too small to encode ({}x{}; H.264 needs at least 2x2 pixels)",
                        name, info.width, info.height));
    if (info.duration <= 0) info.duration = stream_duration;
    // A picture, whatever length it is given (image2 gives a JPEG one frame's, 0.04 s; a GIF of
    // one frame lasts its delay): read by an image demuxer, or one frame with no sound to play
    // under it. A still over audio in a video container is a video.
    const bool still = picture_format(format_name) || (frames == "1" && !info.has_audio) ||
                       // Nor any length: a picture (a PNG has none), or a streamed recording,
                       // whose length only its end tells, unless it is of an image codec.
                       (info.duration <= 0 && picture_codec(codec));
    if (still)
        throw UnusableInput(fmt::format("{}: not a video (a still image, {})", name,
                                        codec.empty() ? format_name : codec));
    return info;
}

MediaInfo probe(const std::string& ffprobe, const std::string& path,
                const std::function<void()>& on_tick) {
    const std::string name = shown_name(path);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        int e = errno;
        if (e == ENOENT || e == ENOTDIR)
            throw UnusableInput(fmt::format("{}: input file not found", name));
        if (e == EACCES || e == ELOOP || e == ENAMETOOLONG)
            throw UnusableInput(fmt::format("{}: cannot access input: {}", name, std::strerror(e)));
        // EIO, ESTALE, a network file system timing out: the file may be fine on the next try.
        throw std::runtime_error(
            fmt::format("{}: cannot access input for now: {}", name, std::strerror(e)));
    }
    if (!S_ISREG(st.st_mode)) throw UnusableInput(fmt::format("{}: not a regular file", name));
    if (::access(path.c_str(), R_OK) != 0)
        throw UnusableInput(
            fmt::format("{}: input file is not readable: {}", name, std::strerror(errno)));
    if (st.st_size == 0) throw UnusableInput(fmt::format("{}: input file is empty", name));

    std::string out;
    TextTail err(8);
    std::vector<std::string> argv = {ffprobe, "-v", "error"};
    for (auto& arg : input_restrictions()) argv.push_back(std::move(arg));
    argv.insert(argv.end(), {"-show_entries",
                             "format=duration,format_name:stream=codec_type,codec_name,width,"
                             "height,sample_aspect_ratio,duration,nb_frames:stream_disposition="
                             "attached_pic:stream_tags=rotate,DURATION:stream_side_data=rotation",
                             "-of", "compact", file_url(path)});
    ChildProcess child(argv);
    Pump pump;
    pump.on_stdout = [&](std::string_view s) {
        if (out.size() < (1u << 20)) out.append(s);
    };
    // ffprobe names the input in its errors: "file:NAME: Invalid data found ...".
    NameMask mask(path);
    pump.on_stderr = [&](std::string_view s) { err.append(mask.feed(s)); };
    pump.on_tick = on_tick;
    ExitStatus status = child.run(pump);
    err.append(mask.flush());
    // A crash says nothing about the file (out of memory, killed): worth another attempt.
    if (!status.exited) throw std::runtime_error(fmt::format("ffprobe {}", status.describe()));
    std::string why = err.text();
    // ffprobe exits 1 when it cannot read the file; any other status is about ffprobe itself (127:
    // it could not be run), which a later attempt, perhaps on another worker, may not share.
    if (status.exited && status.code != 0 && status.code != 1)
        throw std::runtime_error(
            fmt::format("ffprobe {}{}{}", status.describe(), why.empty() ? "" : ": ", why));
    if (!status.success()) {
        if (auto format = whitelist_refusal(why))
            throw UnusableInput(refused_format(name, *format));
        throw UnusableInput(fmt::format("{}: not a readable video (ffprobe {}){}{}", name,
                                        status.describe(), why.empty() ? "" : ": ", why));
    }
    return parse_probe_output(out, path);
}

}  // namespace transcode
