// Job state names.
#include <stdexcept>
#include <string>

#include "hopper/types.hpp"

namespace hopper {

std::string_view to_string(JobState s) {
    switch (s) {
        case JobState::Available:
            return "available";
        case JobState::Scheduled:
            return "scheduled";
        case JobState::Running:
            return "running";
        case JobState::Completed:
            return "completed";
        case JobState::Dead:
            return "dead";
        case JobState::Cancelled:
            return "cancelled";
    }
    return "unknown";
}

JobState parse_job_state(std::string_view s) {
    for (JobState st : {JobState::Available, JobState::Scheduled, JobState::Running,
                        JobState::Completed, JobState::Dead, JobState::Cancelled})
        if (to_string(st) == s) return st;
    throw std::invalid_argument("unknown job state \"" + std::string(s) + "\"");
}

}  // namespace hopper
