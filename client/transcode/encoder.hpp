// Runs one ffmpeg encode to completion or until told to stop, turning its -progress output into
// updates and keeping the tail of its stderr for the failure report.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kill_switch.hpp"
#include "process.hpp"
#include "progress.hpp"

namespace transcode {

struct EncodeOutcome {
    ExitStatus status;
    std::string stderr_tail;
    bool abandoned = false;  // keep_going() said no and the encoder was killed
};

// `keep_going` is asked at least every 200 ms; `on_progress` gets each completed progress block.
// While ffmpeg runs it is registered with `kill_switch`, so a stop from another thread is instant.
// `input_name` (the input file's name) is shown in the tail as shown_name() shows it.
EncodeOutcome run_encoder(const std::vector<std::string>& argv, const std::string& input_name,
                          KillSwitch& kill_switch,
                          const std::function<void(const ProgressUpdate&)>& on_progress,
                          const std::function<bool()>& keep_going);

}  // namespace transcode
