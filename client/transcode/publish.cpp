// StagingDir: mkdtemp, renameat2(RENAME_EXCHANGE) for replacement, recursive clean-up.
#include "publish.hpp"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <system_error>

#include <fmt/format.h>

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

namespace transcode {

namespace fs = std::filesystem;

namespace {

constexpr std::string_view kPartial = ".partial-";
constexpr size_t kSuffixChars = 6;  // mkdtemp's XXXXXX

std::string prefix_for(const std::string& name) {
    return "." + name + std::string(kPartial);
}

[[noreturn]] void fail(const std::string& what, const fs::path& p, int err) {
    throw std::system_error(err, std::generic_category(), fmt::format("{} {}", what, p.string()));
}

}  // namespace

StagingDir::StagingDir(const fs::path& output_dir, const std::string& name)
    : target_(output_dir / name) {
    std::error_code ec;
    fs::create_directories(output_dir, ec);
    if (ec) fail("cannot create output directory", output_dir, ec.value());
    std::string templ = (output_dir / (prefix_for(name) + "XXXXXX")).string();
    if (::mkdtemp(templ.data()) == nullptr)
        fail("cannot create staging directory in", output_dir, errno);
    dir_ = templ;
    // mkdtemp makes it 0700; the published stream must be readable by whoever serves it.
    ::chmod(dir_.c_str(), 0755);
}

StagingDir::~StagingDir() {
    if (published_) return;
    std::error_code ec;
    fs::remove_all(dir_, ec);
}

void StagingDir::publish() {
    if (::rename(dir_.c_str(), target_.c_str()) == 0) {
        published_ = true;
        return;
    }
    if (errno != ENOTEMPTY && errno != EEXIST) fail("cannot publish", target_, errno);
    // A previous output is there (an earlier run of the same video): swap, then drop the old.
    if (::renameat2(AT_FDCWD, dir_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) != 0)
        fail("cannot replace", target_, errno);
    published_ = true;
    std::error_code ec;
    fs::remove_all(dir_, ec);
}

void StagingDir::sweep_stale(const fs::path& output_dir, const std::string& name) {
    std::error_code ec;
    const std::string prefix = prefix_for(name);
    for (fs::directory_iterator it(output_dir, ec), end; !ec && it != end; it.increment(ec)) {
        std::string file = it->path().filename().string();
        if (file.size() == prefix.size() + kSuffixChars &&
            file.compare(0, prefix.size(), prefix) == 0) {
            std::error_code ignored;
            fs::remove_all(it->path(), ignored);
        }
    }
}

std::vector<StagingDir::Found> StagingDir::list(const fs::path& output_dir) {
    std::vector<Found> out;
    std::error_code ec;
    for (fs::directory_iterator it(output_dir, ec), end; !ec && it != end; it.increment(ec)) {
        // "." + name + ".partial-" + XXXXXX, the name not empty.
        std::string file = it->path().filename().string();
        const size_t tail = kPartial.size() + kSuffixChars;
        if (file.size() < 2 + tail || file[0] != '.' ||
            file.compare(file.size() - tail, kPartial.size(), kPartial) != 0)
            continue;
        out.push_back({file.substr(1, file.size() - 1 - tail), it->path()});
    }
    return out;
}

}  // namespace transcode
