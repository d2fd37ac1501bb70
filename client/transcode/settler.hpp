// The rows whose jobs ended without a handler to say so: a job cancelled before any worker took
// it, or dead because its last lease ran out or its worker crashed. Nothing else would ever move
// such a row out of pending or processing, and a pending or processing video refuses a second
// submit, so every worker settles them: at start, then every interval, on a connection of its own.
// In the same pass it clears its output directory of what encodes cut short left there.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include <hopper/client.hpp>

#include "log.hpp"

namespace transcode {

class Settler {
  public:
    Settler(const std::string& conninfo, std::string output_dir, std::chrono::milliseconds interval,
            Log& log);
    ~Settler();
    Settler(const Settler&) = delete;
    Settler& operator=(const Settler&) = delete;

    // One pass (also what the thread runs): settles the rows, then removes the staging
    // directories in this worker's output directory that no running encode writes into: those of
    // videos not processing (the rows just settled, and rows settled earlier by `status`, a
    // second `submit` or another worker, which know no output directory). Returns how many rows
    // it settled.
    size_t settle_once();

  private:
    void loop();
    void sweep_leftovers();

    hopper::Client client_;
    std::string output_dir_;
    std::chrono::milliseconds interval_;
    Log& log_;
    std::mutex mutex_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;
};

}  // namespace transcode
