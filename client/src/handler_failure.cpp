#include "handler_failure.hpp"

#include "hopper/worker.hpp"

namespace hopper::internal {

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
        if (f.error.empty()) f.error = "handler failed";
    } catch (...) {
        f.error = "handler threw a non-standard exception";
    }
    return f;
}

}  // namespace hopper::internal
