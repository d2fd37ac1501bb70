// See settler.hpp.
#include "settler.hpp"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "publish.hpp"
#include "video_store.hpp"

namespace transcode {

Settler::Settler(const std::string& conninfo, std::string output_dir,
                 std::chrono::milliseconds interval, Log& log)
    : client_(conninfo), output_dir_(std::move(output_dir)), interval_(interval), log_(log) {
    thread_ = std::thread([this] { loop(); });
}

Settler::~Settler() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        done_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

size_t Settler::settle_once() {
    auto ids = settle_ended_jobs(client_, std::nullopt);
    for (const auto& id : ids)
        log_.error(
            fmt::format("video {}: its job ended without a worker finishing it: failed", id));
    sweep_leftovers();
    return ids.size();
}

void Settler::sweep_leftovers() {
    // Listed before the rows are read: a directory made after this look is not removed, and one
    // made before it belongs to a run whose claim the read sees (videos_not_processing).
    auto found = StagingDir::list(output_dir_);
    std::vector<std::string> ids;
    for (const auto& f : found)
        // No row holds any other name (a crashed start check's, a stray file's).
        if (valid_video_id(f.name) && std::find(ids.begin(), ids.end(), f.name) == ids.end())
            ids.push_back(f.name);
    if (ids.empty()) return;
    auto idle = videos_not_processing(client_, ids);
    for (const auto& f : found) {
        if (std::find(idle.begin(), idle.end(), f.name) == idle.end()) continue;
        std::error_code ec;
        // Another worker sharing the directory may have been first: nothing left to say then.
        auto removed = std::filesystem::remove_all(f.path, ec);
        if (ec)
            log_.error(fmt::format("video {}: cannot remove {}, left by an encode cut short: {}",
                                   f.name, f.path.string(), ec.message()));
        else if (removed > 0)
            log_.info(fmt::format("video {}: removed {}, left by an encode cut short", f.name,
                                  f.path.string()));
    }
}

void Settler::loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    do {
        try {
            settle_once();
        } catch (const std::exception& e) {
            // The worker goes on without it; the next pass tries again (the connection reconnects).
            log_.error(fmt::format("settling ended jobs failed: {}", e.what()));
        }
    } while (!cv_.wait_for(lock, interval_, [&] { return done_; }));
}

}  // namespace transcode
