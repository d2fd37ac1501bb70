// The one place where C++ and PostgreSQL error handling meet.
//
// Two rules keep the backend alive:
//  1. A C++ exception never crosses into PostgreSQL: every SQL-callable function runs its body
//  through
//     hopper::invoke(), which catches everything and raises a PostgreSQL ERROR only after the C++
//     frames have unwound (their destructors have run).
//  2. A PostgreSQL error (a longjmp) never unwinds C++ frames that own destructors: calls into
//  PostgreSQL
//     that may ereport() go through hopper::pg_guard(), which catches the longjmp right there,
//     copies the error data and throws it as a hopper::PgError.
// A PgError caught from pg_guard must always reach invoke(): the transaction is unusable after it.
#pragma once

#include <exception>
#include <string>
#include <utility>

extern "C" {
#include "postgres.h"
#include "fmgr.h"
#include "utils/elog.h"
}

namespace hopper {

// An error with a real SQLSTATE, raised to the client by invoke().
class PgError : public std::exception {
  public:
    // The rest of what a PostgreSQL error raised under hopper carried, so that it reaches the
    // client as it was raised: a user's trigger on hopper's tables names its constraint and table
    // and says where it failed, and error handlers (GET STACKED DIAGNOSTICS, drivers' fields)
    // read them.
    struct Origin {
        std::string schema, table, column, datatype, constraint;
        std::string context;
        std::string filename, funcname;
        int lineno = 0;
    };

    PgError(int sqlstate, std::string message, std::string detail = {}, std::string hint = {})
        : sqlstate_(sqlstate),
          message_(std::move(message)),
          detail_(std::move(detail)),
          hint_(std::move(hint)) {}
    PgError(int sqlstate, std::string message, std::string detail, std::string hint, Origin origin)
        : PgError(sqlstate, std::move(message), std::move(detail), std::move(hint)) {
        origin_ = std::move(origin);
    }

    const char* what() const noexcept override { return message_.c_str(); }
    int sqlstate() const noexcept { return sqlstate_; }
    const std::string& detail() const noexcept { return detail_; }
    const std::string& hint() const noexcept { return hint_; }
    const Origin& origin() const noexcept { return origin_; }

  private:
    int sqlstate_;
    std::string message_;
    std::string detail_;
    std::string hint_;
    Origin origin_;  // empty for errors hopper raises itself
};

namespace detail {
// Raises the pending error saved by invoke(); never returns. Defined in boundary.cpp.
[[noreturn]] void raise_saved_error();
void save_error(const PgError& e) noexcept;
void save_error(const char* what) noexcept;

// Runs fn (a plain C callback) with PG_TRY; on a PostgreSQL error, copies it and throws PgError.
void guarded_call(void (*fn)(void*), void* arg);

// Runs f; if it throws, saves the exception for raise_saved_error() and returns false. The caller
// raises only once its own C++ frames are gone (or no longer matter).
template <typename F>
bool capture_errors(F&& f) noexcept {
    try {
        f();
        return true;
    } catch (const PgError& e) {
        save_error(e);
    } catch (const std::exception& e) {
        save_error(e.what());
    } catch (...) {
        save_error("unknown C++ exception");
    }
    return false;
}
}  // namespace detail

// Runs f, turning a PostgreSQL ERROR raised inside it into a C++ PgError.
// f must not own objects with destructors across the PostgreSQL calls it makes: keep it a thin
// wrapper around the C API. Should f throw all the same, the exception is held until PG_TRY's
// block has been left: thrown through it, it would leave PostgreSQL's error stack pointing into
// a frame that is gone, and the next ERROR would jump there.
template <typename F>
auto pg_guard(F&& f) -> decltype(f()) {
    using R = decltype(f());
    if constexpr (std::is_void_v<R>) {
        struct Ctx {
            F* f;
            std::exception_ptr thrown;
        } ctx{&f, nullptr};
        auto tramp = [](void* p) {
            auto* c = static_cast<Ctx*>(p);
            try {
                (*c->f)();
            } catch (...) {
                c->thrown = std::current_exception();
            }
        };
        detail::guarded_call(tramp, &ctx);
        if (ctx.thrown) std::rethrow_exception(ctx.thrown);
    } else {
        struct Ctx {
            F* f;
            std::exception_ptr thrown;
            R result;
        } ctx{&f, nullptr, R{}};
        auto tramp = [](void* p) {
            auto* c = static_cast<Ctx*>(p);
            try {
                c->result = (*c->f)();
            } catch (...) {
                c->thrown = std::current_exception();
            }
        };
        detail::guarded_call(tramp, &ctx);
        if (ctx.thrown) std::rethrow_exception(ctx.thrown);
        return ctx.result;
    }
}

// The entry wrapper for every SQL-callable function.
template <typename F>
Datum invoke(FunctionCallInfo fcinfo, F&& body) noexcept {
    Datum result = (Datum)0;
    bool ok = detail::capture_errors([&] { result = body(fcinfo); });
    // Every C++ frame of body is gone by now: raising (a longjmp) is safe here.
    if (!ok) detail::raise_saved_error();
    return result;
}

}  // namespace hopper

// Declares a SQL-callable function whose body runs inside hopper::invoke().
#define HOPPER_FUNCTION(name)                          \
    static Datum name##_impl(FunctionCallInfo fcinfo); \
    extern "C" {                                       \
    PG_FUNCTION_INFO_V1(name);                         \
    PGDLLEXPORT Datum name(PG_FUNCTION_ARGS) {         \
        return hopper::invoke(fcinfo, name##_impl);    \
    }                                                  \
    }                                                  \
    static Datum name##_impl(FunctionCallInfo fcinfo)
