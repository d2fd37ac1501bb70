// What a handler's exception asks for: the error recorded, and how the job is retried (RetryIn:
// after its delay; PermanentFailure: never). One mapping, so that Worker and TakeWorker agree.
#pragma once

#include <exception>
#include <string>

#include "hopper/types.hpp"

namespace hopper::internal {

struct HandlerFailure {
    std::string error;
    FailOptions options;
};

// `thrown` is the exception a handler threw (std::current_exception() in a catch block).
HandlerFailure handler_failure(const std::exception_ptr& thrown);

}  // namespace hopper::internal
