// The reaper's settings; see include/hopper/reaper.hpp.
#include "hopper/reaper.hpp"

extern "C" {
#include "utils/guc.h"
}

namespace hopper::reaper {

bool enabled = true;
int naptime_ms = 1000;
int batch_size = 1000;
int prune_interval_s = 60;
int relay_interval_ms = 1;
bool preloaded = false;

void define_gucs() {
    DefineCustomBoolVariable(
        "hopper.reaper_enabled", "Run a reaper in every database that has the hopper extension.",
        "When off, no reaper is started and running ones exit at their next pass.", &enabled, true,
        PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("hopper.reaper_naptime", "Pause between two passes of a reaper.",
                            "Also the longest a crashed session-bound job waits to be rescued.",
                            &naptime_ms, 1000, 10, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS, nullptr,
                            nullptr, nullptr);
    DefineCustomIntVariable(
        "hopper.reaper_batch_size",
        "Most jobs a reaper rescues or history rows it deletes per transaction.", nullptr,
        &batch_size, 1000, 1, 100000, PGC_SIGHUP, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("hopper.reaper_prune_interval",
                            "Pause between two history retention runs of a reaper.", nullptr,
                            &prune_interval_s, 60, 1, 24 * 3600, PGC_SIGHUP, GUC_UNIT_S, nullptr,
                            nullptr, nullptr);
    DefineCustomIntVariable(
        "hopper.notify_relay_interval",
        "Shortest pause between two wake-up relay steps of a reaper.",
        "A relay step right after an idle spell goes out at once; the next waits this long, and "
        "every push committed meanwhile is announced by it. Pushes that come while the reaper "
        "waits do not have to signal it. 0: one step per push.",
        &relay_interval_ms, 1, 0, 1000, PGC_SIGHUP, GUC_UNIT_MS, nullptr, nullptr, nullptr);
}

const char* mode_name(Mode m) {
    return m == Mode::preload ? "preload" : "dynamic";
}

}  // namespace hopper::reaper
