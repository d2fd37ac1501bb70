#include "option_checks.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "hopper/utf8.hpp"

namespace hopper {

bool is_queue_name(std::string_view name) {
    // The server's rule (extension/src/args.cpp, check_queue_name).
    if (name.empty() || name.size() > 48) return false;
    for (size_t i = 0; i < name.size(); ++i) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  (i > 0 && (c == '_' || c == '.' || c == ':' || c == '-'));
        if (!ok) return false;
    }
    return true;
}

namespace internal {

namespace {

constexpr size_t kMaxWorkerName =
    128;  // bytes: the server's limit (extension/include/hopper/args.hpp)

}  // namespace

void check_worker_options(const std::string& queue, const std::string& name, Duration poll_interval,
                          double poll_jitter, Duration shutdown_timeout) {
    if (queue.empty()) throw std::invalid_argument("queue must not be empty");
    if (!is_queue_name(queue))
        throw std::invalid_argument(
            fmt::format("invalid queue name \"{}\": 1 to 48 characters from A-Z a-z 0-9 _ . : -, "
                        "starting with a letter or digit",
                        escaped_utf8(queue)));
    if (queue == "done") throw std::invalid_argument("the queue name \"done\" is reserved");
    if (name.size() > kMaxWorkerName)
        throw std::invalid_argument(
            fmt::format("name is {} bytes long; the limit is {}", name.size(), kMaxWorkerName));
    if (poll_interval < Duration::zero())
        throw std::invalid_argument("poll_interval must not be negative");
    // NaN passes every comparison false: it would reach the jitter arithmetic as a delay.
    if (!std::isfinite(poll_jitter) || poll_jitter < 0 || poll_jitter > 1)
        throw std::invalid_argument("poll_jitter must be between 0 and 1");
    if (shutdown_timeout < Duration::zero())
        throw std::invalid_argument("shutdown_timeout must not be negative");
}

bool refused_for_good(const Error& e) {
    const std::string& s = e.sqlstate();
    // Of class 22 only what the argument checks raise about the call's own values: the rest of
    // the class (a division by zero, an overflow, a trigger's bad value) may come from one job or
    // one setting, which a retry outlives, and must not stop every worker of the queue.
    // Of class 42 not 42P05, a prepared statement of that name that exists already: behind a
    // connection pooler the client has not recognized as one (HOPPER_POOLER), another client
    // prepared it in the server session this transaction runs in, and the next may run in another.
    if (s == "42P05") return false;
    return s == "22023" || s == "22004" || s == "2202E" || s == "22021" || s.rfind("42", 0) == 0 ||
           s == "3F000" || s == "0A000";
}

}  // namespace internal
}  // namespace hopper
