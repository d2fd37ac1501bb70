#include "worker_name.hpp"

#include <unistd.h>

#include <fmt/format.h>

namespace hopper::internal {

std::string default_worker_name() {
    char host[256] = "";
    ::gethostname(host, sizeof host - 1);
    return fmt::format("{}:{}", host, ::getpid());
}

}  // namespace hopper::internal
