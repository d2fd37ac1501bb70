// NOTIFY for waiting workers and waiting clients; see include/hopper/notify.hpp.
#include "hopper/notify.hpp"
#include "hopper/args.hpp"
#include "hopper/boundary.hpp"
#include "hopper/guc.hpp"

extern "C" {
#include "commands/async.h"
}

namespace hopper::notify {

void tell_listeners(const std::string& queue) {
    if (!guc::notify) return;
    // Only a queue's own name: hopper.queues holds every queue to one, but a job row written by
    // hand (producers may insert into hopper.jobs, workers update it) may name anything, and a
    // name too long for a channel would make NOTIFY fail the transaction that put its jobs back
    // (the reaper's rescue of every gone session's jobs, say). "done" is hopper:done's.
    if (!args::is_queue_name(queue)) return;
    std::string channel = "hopper:" + queue;
    pg_guard([&] { Async_Notify(channel.c_str(), ""); });
}

void slot_freed(const std::string& queue) {
    wake_pulls_at_commit(queue, 1);
}

void job_done(int64_t id, const std::string& queue, const char* state, bool queue_notifies_done) {
    if (!guc::notify || !queue_notifies_done) return;
    // Queue names are restricted to [A-Za-z0-9_.:-], so they need no JSON escaping. The flag is
    // read from the queue's row, whose name is one; checked all the same, as it is spliced in.
    if (!args::is_queue_name(queue)) return;
    std::string payload = "{\"id\": " + std::to_string(id) + ", \"queue\": \"" + queue +
                          "\", \"state\": \"" + state + "\"}";
    pg_guard([&] { Async_Notify("hopper:done", payload.c_str()); });
}

}  // namespace hopper::notify
