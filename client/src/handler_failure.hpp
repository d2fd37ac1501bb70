// What a handler's exception asks for: the error recorded, and how the job is retried (RetryIn:
// after its delay; PermanentFailure: never). One mapping, so that Worker and TakeWorker agree.
#pragma once

#include <exception>
#include <string>
#include <string_view>

#include "hopper/error.hpp"
#include "hopper/types.hpp"

namespace hopper::internal {

struct HandlerFailure {
    std::string error;
    FailOptions options;
};

// `thrown` is the exception a handler threw (std::current_exception() in a catch block). The
// error is valid UTF-8 and the delay within what the server accepts: a failure the server refused
// to record would leave its job to be run again without its attempt counted.
HandlerFailure handler_failure(const std::exception_ptr& thrown);

// The longest retry_in queue_fail and queue_fail_taken accept (366 days).
inline constexpr Duration kMaxRetryIn = std::chrono::seconds(31622400);

// `o` with retry_in kept to 0 .. kMaxRetryIn.
FailOptions within_server_limits(FailOptions o);

// Whether the server refused a call for its data (SQLSTATE class 22, or class 54: a value too
// large or nested too deep to store): the same call would be refused again, where a timeout,
// deadlock or serialization failure may pass on a retry.
bool refused_data(const Error& e);

// Whether a call failed for the moment only and may pass if made again: a serialization failure
// or deadlock (class 40), a lock or statement timeout, a cancel, or the server short of a
// resource (class 53).
bool transient(const Error& e);

// A failure the server refused, made plainer to be recorded again: its text valid UTF-8 and not
// empty, and no delay of its own (the queue's backoff applies).
void make_plainer(std::string& error, FailOptions& options);

}  // namespace hopper::internal
