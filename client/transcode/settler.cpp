// See settler.hpp.
#include "settler.hpp"

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
    for (const auto& id : ids) {
        // The encode that was cut short may have been this machine's.
        StagingDir::sweep_stale(output_dir_, id);
        log_.error(
            fmt::format("video {}: its job ended without a worker finishing it: failed", id));
    }
    return ids.size();
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
