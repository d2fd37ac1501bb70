// run_encoder: ChildProcess + ProgressParser + TextTail.
#include "encoder.hpp"

#include "names.hpp"
#include "text_tail.hpp"

namespace transcode {

EncodeOutcome run_encoder(const std::vector<std::string>& argv, const std::string& input_name,
                          KillSwitch& kill_switch,
                          const std::function<void(const ProgressUpdate&)>& on_progress,
                          const std::function<bool()>& keep_going) {
    EncodeOutcome outcome;
    TextTail tail(15);
    ProgressParser parser;
    ChildProcess child(argv);
    KillSwitch::Armed armed(kill_switch, child);
    Pump pump;
    pump.on_stdout = [&](std::string_view chunk) {
        for (const auto& update : parser.feed(chunk))
            if (on_progress) on_progress(update);
    };
    // ffmpeg names the input in some errors ("file:NAME: Invalid data found ...").
    NameMask mask(input_name);
    pump.on_stderr = [&](std::string_view chunk) { tail.append(mask.feed(chunk)); };
    pump.on_tick = [&] {
        if (!outcome.abandoned && keep_going && !keep_going()) {
            outcome.abandoned = true;
            child.kill();
        }
    };
    outcome.status = child.run(pump);
    tail.append(mask.flush());
    outcome.stderr_tail = tail.text();
    return outcome;
}

}  // namespace transcode
