// The name a worker records on its jobs when its options give none.
#pragma once

#include <string>

namespace hopper::internal {

// "host:pid": enough for an operator to find the process that ran a job.
std::string default_worker_name();

}  // namespace hopper::internal
