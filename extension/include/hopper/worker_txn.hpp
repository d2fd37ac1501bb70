// Transactions for hopper's background workers, which have no client to start them.
//
// in_transaction() runs C++ code in a transaction of its own and commits it. Errors stay C++
// exceptions all the way: a PostgreSQL error inside (caught by pg_guard) or a failed commit aborts
// the transaction and is rethrown as hopper::PgError, so the worker's main loop catches it after
// every C++ frame has unwound, logs it and goes on with its next pass.
#pragma once

#include <exception>
#include <string>
#include <utility>

#include "hopper/boundary.hpp"

namespace hopper::worker {

void begin_transaction();
void commit_transaction();
// Rolls back whatever transaction state there is (none, open, or failed). Never throws.
void abort_transaction() noexcept;

// The abort runs after the catch block has ended: should it raise (a longjmp to the worker's
// sigsetjmp), it must not leave from inside a handler, whose exception would never be freed.
template <typename F>
void in_transaction(F&& body) {
    begin_transaction();
    std::exception_ptr failed;
    try {
        std::forward<F>(body)();
        commit_transaction();
    } catch (...) {
        failed = std::current_exception();
    }
    if (failed) {
        abort_transaction();
        std::rethrow_exception(failed);
    }
}

// Runs body in a transaction of its own, as in_transaction() does, and says whether it committed.
// A failure is not reported: the caller has another way to do the work (the reaper's batched steps
// go on one row at a time). A cancel or shutdown (SQLSTATE class 57) still propagates.
template <typename F>
bool committed(F&& body) {
    try {
        in_transaction(std::forward<F>(body));
        return true;
    } catch (const PgError& e) {
        if (ERRCODE_TO_CATEGORY(e.sqlstate()) == ERRCODE_OPERATOR_INTERVENTION) throw;
        return false;
    }
}

// Failures in a worker's main loop, in two steps so that nothing that may raise a PostgreSQL error
// runs inside a C++ catch block:
//   try { ... } catch (...) { worker::remember_failure(); failed = true; }
//   if (failed) worker::report_failure("what was being done");
// remember_failure copies the current exception's message; report_failure rolls back any
// transaction left open and logs the message as a WARNING.
void remember_failure() noexcept;
void report_failure(const char* what_failed);

// Runs one step of a worker's pass (f opens its own transactions). If it fails, the failure is
// logged as a WARNING naming the step and the pass goes on: one bad queue or schedule must not
// stop the others' work. A cancel or shutdown (SQLSTATE class 57) still ends the pass. Returns
// whether the step succeeded.
template <typename F>
bool reported(const std::string& what, F&& f) {
    bool failed = false;
    try {
        std::forward<F>(f)();
    } catch (const PgError& e) {
        if (ERRCODE_TO_CATEGORY(e.sqlstate()) == ERRCODE_OPERATOR_INTERVENTION) throw;
        remember_failure();
        failed = true;
    }
    if (failed) report_failure(what.c_str());
    return !failed;
}

}  // namespace hopper::worker
