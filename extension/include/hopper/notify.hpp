// LISTEN/NOTIFY channels: "hopper:<queue>" when jobs become available there, "hopper:done" with
// {"id", "queue", "state"} when a job finishes (completed, dead or cancelled). PostgreSQL delivers
// notifications at commit and folds identical ones of one transaction into one.
#pragma once

#include <cstdint>
#include <string>

namespace hopper::notify {
void queue_ready(const std::string& queue);
void job_done(int64_t id, const std::string& queue, const char* state);
}  // namespace hopper::notify
