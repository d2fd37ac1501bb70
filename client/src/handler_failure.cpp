#include "handler_failure.hpp"

#include <algorithm>

#include "hopper/utf8.hpp"
#include "hopper/worker.hpp"

namespace hopper::internal {

FailOptions within_server_limits(FailOptions o) {
    if (o.retry_in) o.retry_in = std::clamp(*o.retry_in, Duration::zero(), kMaxRetryIn);
    return o;
}

bool refused_data(const Error& e) {
    const std::string& s = e.sqlstate();
    // Class 54 is a value beyond what the server can take (too large, nested too deep): the
    // same value is refused again each time, as a malformed one is.
    return s.rfind("22", 0) == 0 || s.rfind("54", 0) == 0;
}

bool transient(const Error& e) {
    const std::string& s = e.sqlstate();
    return s.rfind("40", 0) == 0 || s.rfind("53", 0) == 0 || s == "55P03" || s == "57014";
}

void make_plainer(std::string& error, FailOptions& options) {
    error = valid_utf8(error);
    if (error.empty()) error = "handler failed";
    options.retry_in.reset();
}

HandlerFailure handler_failure(const std::exception_ptr& thrown) {
    HandlerFailure f;
    try {
        std::rethrow_exception(thrown);
    } catch (const RetryIn& e) {
        f.error = e.what();
        f.options.retry_in = e.delay();
    } catch (const PermanentFailure& e) {
        f.error = e.what();
        f.options.permanent = true;
    } catch (const std::exception& e) {
        f.error = e.what();
    } catch (...) {
        f.error = "handler threw a non-standard exception";
    }
    f.error = valid_utf8(f.error);
    if (f.error.empty()) f.error = "handler failed";
    f.options = within_server_limits(f.options);
    return f;
}

}  // namespace hopper::internal
