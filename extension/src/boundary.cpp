// Error plumbing between C++ and PostgreSQL; see include/hopper/boundary.hpp for the rules.
#include <cstring>
#include <new>
#include <string>

#include "hopper/boundary.hpp"

extern "C" {
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

void copy_into(char* dst, size_t size, const char* src) {
    if (src == nullptr) src = "";
    std::strncpy(dst, src, size - 1);
    dst[size - 1] = '\0';
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
    std::string msg = std::string("hopper internal error: ") + what;
    copy_into(saved.message, sizeof saved.message, msg.c_str());
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

    int code = edata->sqlerrcode;
    std::string message = edata->message ? edata->message : "unknown PostgreSQL error";
    std::string detail = edata->detail ? edata->detail : "";
    std::string hint = edata->hint ? edata->hint : "";
    FreeErrorData(edata);
    throw PgError(code, std::move(message), std::move(detail), std::move(hint));
}

}  // namespace hopper::detail
