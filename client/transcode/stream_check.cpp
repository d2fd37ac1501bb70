// check_stream: reads the playlists ffmpeg wrote and stats every file they name.
#include "stream_check.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

namespace transcode {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> read_lines(const fs::path& file, const std::string& name) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw IncompleteOutput(fmt::format("{} was not written", name));
    std::vector<std::string> lines;
    std::string line;
    while (std::getline(in, line)) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (!line.empty()) lines.push_back(line);
    }
    if (in.bad()) throw IncompleteOutput(fmt::format("{} cannot be read back", name));
    if (lines.empty()) throw IncompleteOutput(fmt::format("{} is empty", name));
    if (lines.front() != "#EXTM3U") throw IncompleteOutput(fmt::format("{} is no playlist", name));
    return lines;
}

bool is_uri(const std::string& line) {
    return line[0] != '#';
}

// A file a playlist names, relative to the playlist, must be there and hold something.
void check_file(const fs::path& file, const std::string& name) {
    std::error_code ec;
    auto size = fs::file_size(file, ec);
    if (ec) throw IncompleteOutput(fmt::format("{} is missing", name));
    if (size == 0) throw IncompleteOutput(fmt::format("{} is empty", name));
}

PlaylistDuration check_media_playlist(const fs::path& dir, const std::string& playlist) {
    auto lines = read_lines(dir / playlist, playlist);
    if (lines.back() != "#EXT-X-ENDLIST")
        throw IncompleteOutput(fmt::format("{} is cut short (no #EXT-X-ENDLIST)", playlist));
    const fs::path base = fs::path(playlist).parent_path();
    PlaylistDuration d{playlist, 0};
    int segments = 0;
    for (const auto& line : lines) {
        if (line.rfind("#EXTINF:", 0) == 0) {
            d.seconds += std::strtod(line.c_str() + 8, nullptr);
        } else if (is_uri(line)) {
            ++segments;
            check_file(dir / base / line, (base / line).string());
        }
    }
    if (segments == 0) throw IncompleteOutput(fmt::format("{} names no segment", playlist));
    return d;
}

}  // namespace

std::vector<PlaylistDuration> check_stream(const fs::path& dir, const EncodePlan& plan) {
    std::vector<PlaylistDuration> out;
    if (!plan.renditions.empty() && plan.playlist == plan.renditions.front().playlist) {
        out.push_back(check_media_playlist(dir, plan.playlist));
        return out;
    }
    // A master playlist: it must name every rendition, and each of those must be whole.
    auto lines = read_lines(dir / plan.playlist, plan.playlist);
    for (const auto& r : plan.renditions) {
        if (std::find(lines.begin(), lines.end(), r.playlist) == lines.end())
            throw IncompleteOutput(
                fmt::format("{} does not name the {} rendition", plan.playlist, r.name));
        out.push_back(check_media_playlist(dir, r.playlist));
    }
    return out;
}

double duration_tolerance(double probed_seconds) {
    return std::max(1.0, 0.02 * probed_seconds);
}

const PlaylistDuration* short_playlist(const std::vector<PlaylistDuration>& playlists,
                                       double probed_seconds) {
    if (!(probed_seconds > 0)) return nullptr;
    const double least = probed_seconds - duration_tolerance(probed_seconds);
    for (const auto& p : playlists)
        if (p.seconds < least) return &p;
    return nullptr;
}

double longest(const std::vector<PlaylistDuration>& playlists) {
    double most = 0;
    for (const auto& p : playlists) most = std::max(most, p.seconds);
    return most;
}

}  // namespace transcode
