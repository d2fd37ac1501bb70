// Error plumbing between C++ and PostgreSQL; see include/hopper/boundary.hpp for the rules.
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

#include "hopper/boundary.hpp"

extern "C" {
#include "mb/pg_wchar.h"
#include "utils/memutils.h"
}

namespace hopper::detail {
namespace {

// Plain buffers, not std::string: raise_saved_error() longjmps, so nothing it reads may need a
// destructor, and saving must not allocate (it may be reporting an out-of-memory).
struct SavedError {
    int sqlstate;
    char message[1024];
    char detail[1024];
    char hint[512];
};
SavedError saved;

// Shortened, if it must be, at a character boundary of the database's encoding: half a character
// would be invalid in the message the client receives.
void copy_into(char* dst, size_t size, const char* src) noexcept {
    if (src == nullptr) src = "";
    size_t len = std::strlen(src);
    if (len > size - 1)
        len = static_cast<size_t>(
            pg_mbcliplen(src, static_cast<int>(len), static_cast<int>(size - 1)));
    std::memcpy(dst, src, len);
    dst[len] = '\0';
}

}  // namespace

void save_error(const PgError& e) noexcept {
    saved.sqlstate = e.sqlstate();
    copy_into(saved.message, sizeof saved.message, e.what());
    copy_into(saved.detail, sizeof saved.detail, e.detail().c_str());
    copy_into(saved.hint, sizeof saved.hint, e.hint().c_str());
}

void save_error(const char* what) noexcept {
    // A C++ failure that is not a PgError is a bug in hopper (or memory exhaustion); class 38 is
    // "external routine exception", which is what it is from PostgreSQL's point of view.
    saved.sqlstate = ERRCODE_EXTERNAL_ROUTINE_EXCEPTION;
    if (std::strcmp(what, std::bad_alloc().what()) == 0) saved.sqlstate = ERRCODE_OUT_OF_MEMORY;
    // Not through std::string: this may be reporting that memory ran out, and a throw from this
    // noexcept function would abort the backend, and with it every session of the server.
    char msg[sizeof saved.message];
    snprintf(msg, sizeof msg, "hopper internal error: %s", what);
    copy_into(saved.message, sizeof saved.message, msg);
    saved.detail[0] = '\0';
    saved.hint[0] = '\0';
}

void raise_saved_error() {
    ereport(ERROR, (errcode(saved.sqlstate), errmsg_internal("%s", saved.message),
                    saved.detail[0] ? errdetail_internal("%s", saved.detail) : 0,
                    saved.hint[0] ? errhint("%s", saved.hint) : 0));
    pg_unreachable();
}

void guarded_call(void (*fn)(void*), void* arg) {
    MemoryContext caller_context = CurrentMemoryContext;
    ErrorData* volatile edata = nullptr;
    PG_TRY();
    { fn(arg); }
    PG_CATCH();
    {
        MemoryContextSwitchTo(caller_context);
        edata = CopyErrorData();
        FlushErrorState();
    }
    PG_END_TRY();
    if (edata == nullptr) return;

    // Copying may itself run out of memory; the std::bad_alloc then reaches invoke() in place of
    // the error (reported as 53200), and edata goes with the caller's memory context.
    int code = edata->sqlerrcode;
    std::string message = edata->message ? edata->message : "unknown PostgreSQL error";
    std::string detail = edata->detail ? edata->detail : "";
    std::string hint = edata->hint ? edata->hint : "";
    FreeErrorData(edata);
    throw PgError(code, std::move(message), std::move(detail), std::move(hint));
}

}  // namespace hopper::detail
