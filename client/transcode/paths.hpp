// The absolute path recorded for an upload or the output directory: the name as given, made
// absolute, that the kernel resolves to the same file from any directory.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace transcode {

// `path` from the working directory (std::filesystem::absolute, which throws for an empty one),
// with its "." components and repeated '/' dropped: neither changes what the kernel finds. ".."
// stays where it is: the kernel takes it from where the components before it lead, through a
// symbolic link to wherever that points, so "up/../clip.mp4" with `up` a link names a file next
// to the link's target, which a lexical "clip.mp4" would not. No link is resolved either: the
// workers, on other machines, read the path as the submitter's machine wrote it.
inline std::string absolute_path(const std::string& path) {
    const std::string whole = std::filesystem::absolute(path).string();
    std::string out;
    bool names_directory = false;  // ends in '/' or "/.": only a directory may be there
    size_t at = 0;
    while (at <= whole.size()) {
        size_t end = whole.find('/', at);
        if (end == std::string::npos) end = whole.size();
        std::string_view part(whole.data() + at, end - at);
        names_directory = part.empty() || part == ".";
        if (!names_directory) {
            out += '/';
            out += part;
        }
        at = end + 1;
    }
    if (out.empty() || names_directory) out += '/';
    return out;
}

}  // namespace transcode
