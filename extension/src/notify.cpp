// NOTIFY for waiting workers and waiting clients; see include/hopper/notify.hpp.
#include "hopper/notify.hpp"
#include "hopper/boundary.hpp"
#include "hopper/guc.hpp"

extern "C" {
#include "commands/async.h"
}

namespace hopper::notify {

void tell_listeners(const std::string& queue) {
    if (!guc::notify) return;
    std::string channel = "hopper:" + queue;
    pg_guard([&] { Async_Notify(channel.c_str(), ""); });
}

void slot_freed(const std::string& queue) {
    wake_pulls_at_commit(queue, 1);
}

void job_done(int64_t id, const std::string& queue, const char* state, bool queue_notifies_done) {
    if (!guc::notify || !queue_notifies_done) return;
    // Queue names are restricted to [A-Za-z0-9_.:-], so they need no JSON escaping.
    std::string payload = "{\"id\": " + std::to_string(id) + ", \"queue\": \"" + queue +
                          "\", \"state\": \"" + state + "\"}";
    pg_guard([&] { Async_Notify("hopper:done", payload.c_str()); });
}

}  // namespace hopper::notify
