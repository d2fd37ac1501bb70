// One process_raw_video job: probe, encode to HLS, publish, and complete together with the video
// row's update.
#pragma once

#include <optional>
#include <string>

#include <hopper/worker.hpp>

#include "cli_args.hpp"
#include "hls.hpp"
#include "log.hpp"

namespace transcode {

struct JobSettings {
    std::string output_dir;  // absolute
    EncodeSettings encode;
    std::string ffprobe = "ffprobe";
    std::optional<Micros> timeout;
};

// The job handler. Throws hopper::PermanentFailure for inputs that can never work (and on the last
// attempt), other exceptions for failures worth a retry; returns normally when the job finished
// or was stopped (cancelled, lost, worker shutdown).
void transcode_video(hopper::JobContext& job, const JobSettings& settings, Log& log);

}  // namespace transcode
