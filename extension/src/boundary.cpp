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
    // From a PostgreSQL error only (PgError::Origin); empty otherwise.
    char schema[NAMEDATALEN];
    char table[NAMEDATALEN];
    char column[NAMEDATALEN];
    char datatype[NAMEDATALEN];
    char constraint[NAMEDATALEN];
    char context[2048];
    char filename[256];
    char funcname[128];
    int lineno;
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

void clear_origin() noexcept {
    saved.schema[0] = saved.table[0] = saved.column[0] = saved.datatype[0] = '\0';
    saved.constraint[0] = saved.context[0] = saved.filename[0] = saved.funcname[0] = '\0';
    saved.lineno = 0;
}

void save_error(const PgError& e) noexcept {
    saved.sqlstate = e.sqlstate();
    copy_into(saved.message, sizeof saved.message, e.what());
    copy_into(saved.detail, sizeof saved.detail, e.detail().c_str());
    copy_into(saved.hint, sizeof saved.hint, e.hint().c_str());
    const PgError::Origin& o = e.origin();
    copy_into(saved.schema, sizeof saved.schema, o.schema.c_str());
    copy_into(saved.table, sizeof saved.table, o.table.c_str());
    copy_into(saved.column, sizeof saved.column, o.column.c_str());
    copy_into(saved.datatype, sizeof saved.datatype, o.datatype.c_str());
    copy_into(saved.constraint, sizeof saved.constraint, o.constraint.c_str());
    copy_into(saved.context, sizeof saved.context, o.context.c_str());
    copy_into(saved.filename, sizeof saved.filename, o.filename.c_str());
    copy_into(saved.funcname, sizeof saved.funcname, o.funcname.c_str());
    saved.lineno = o.lineno;
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
    clear_origin();
}

void raise_saved_error() {
    // ereport() spelled out, so that an error PostgreSQL raised keeps the place it came from (the
    // saved buffers outlive the report, as errfinish's file name must).
    if (errstart(ERROR, TEXTDOMAIN)) {
        errcode(saved.sqlstate);
        errmsg_internal("%s", saved.message);
        if (saved.detail[0]) errdetail_internal("%s", saved.detail);
        if (saved.hint[0]) errhint("%s", saved.hint);
        if (saved.context[0]) errcontext_msg("%s", saved.context);
        if (saved.schema[0]) err_generic_string(PG_DIAG_SCHEMA_NAME, saved.schema);
        if (saved.table[0]) err_generic_string(PG_DIAG_TABLE_NAME, saved.table);
        if (saved.column[0]) err_generic_string(PG_DIAG_COLUMN_NAME, saved.column);
        if (saved.datatype[0]) err_generic_string(PG_DIAG_DATATYPE_NAME, saved.datatype);
        if (saved.constraint[0]) err_generic_string(PG_DIAG_CONSTRAINT_NAME, saved.constraint);
        // The saved context already holds the callers' frames (it was made beneath them), which
        // errfinish would add again; the callers' PG_CATCH put the stack back after the jump.
        if (saved.context[0]) error_context_stack = nullptr;
        if (saved.filename[0])
            errfinish(saved.filename, saved.lineno, saved.funcname[0] ? saved.funcname : nullptr);
        else
            errfinish(__FILE__, __LINE__, PG_FUNCNAME_MACRO);
    }
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
    auto text = [](const char* s) { return std::string(s ? s : ""); };
    PgError::Origin origin;
    origin.schema = text(edata->schema_name);
    origin.table = text(edata->table_name);
    origin.column = text(edata->column_name);
    origin.datatype = text(edata->datatype_name);
    origin.constraint = text(edata->constraint_name);
    origin.context = text(edata->context);
    origin.filename = text(edata->filename);
    origin.funcname = text(edata->funcname);
    origin.lineno = edata->lineno;
    FreeErrorData(edata);
    throw PgError(code, std::move(message), std::move(detail), std::move(hint), std::move(origin));
}

}  // namespace hopper::detail
