// Connection: one PGconn, its prepared statements and its notifications.
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <iterator>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>
#include <libpq-fe.h>

#include "hopper/connection.hpp"
#include "hopper/error.hpp"

namespace hopper {

namespace {

constexpr const char* kStatementUnknown = "26000";  // invalid_sql_statement_name
constexpr const char* kStatementExists = "42P05";   // duplicate_prepared_statement

struct FreeMem {
    void operator()(void* p) const noexcept { PQfreemem(p); }
};

std::string field(const PGresult* res, int code) {
    const char* v = PQresultErrorField(res, code);
    return v ? v : "";
}

std::string trimmed(const char* msg) {
    std::string s = msg ? msg : "";
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

}  // namespace

void Connection::Finish::operator()(pg_conn* c) const noexcept {
    PQfinish(c);
}

Connection::Connection(std::string conninfo) : conninfo_(std::move(conninfo)) {
    connect();
}
// A moved-from Connection keeps no conninfo: reconnecting it would reach whatever database the
// PG* environment names, so it refuses instead.
Connection::Connection(Connection&& o) noexcept
    : conninfo_(std::move(o.conninfo_)),
      conn_(std::move(o.conn_)),
      prepared_(std::move(o.prepared_)),
      on_connect_(std::move(o.on_connect_)),
      put_back_(std::move(o.put_back_)),
      moved_from_(std::exchange(o.moved_from_, true)) {}

Connection& Connection::operator=(Connection&& o) noexcept {
    if (this == &o) return *this;
    conninfo_ = std::move(o.conninfo_);
    conn_ = std::move(o.conn_);
    prepared_ = std::move(o.prepared_);
    on_connect_ = std::move(o.on_connect_);
    put_back_ = std::move(o.put_back_);
    moved_from_ = std::exchange(o.moved_from_, true);
    return *this;
}

Connection::~Connection() = default;

pg_conn* Connection::live() {
    if (moved_from_) throw std::logic_error("hopper::Connection used after it was moved from");
    if (!conn_) throw ConnectionError("not connected");
    return conn_.get();
}

void Connection::on_connect(std::string sql) {
    if (ok()) exec(sql);
    on_connect_.push_back(std::move(sql));
}

void Connection::connect() {
    if (moved_from_) throw std::logic_error("hopper::Connection used after it was moved from");
    prepared_.clear();
    conn_.reset(PQconnectdb(conninfo_.c_str()));
    if (!conn_) throw ConnectionError("out of memory while connecting");
    if (PQstatus(conn_.get()) != CONNECTION_OK)
        throw ConnectionError(
            fmt::format("could not connect: {}", trimmed(PQerrorMessage(conn_.get()))));
    // Silence NOTICEs (e.g. "extension already exists") that libpq would print to stderr.
    PQsetNoticeProcessor(
        conn_.get(), [](void*, const char*) {}, nullptr);
    for (const std::string& sql : on_connect_) exec(sql);
}

void Connection::reconnect() {
    connect();
}

bool Connection::ok() const {
    return conn_ && PQstatus(conn_.get()) == CONNECTION_OK;
}

bool Connection::in_transaction() const {
    if (!conn_) return false;
    auto st = PQtransactionStatus(conn_.get());
    return st == PQTRANS_INTRANS || st == PQTRANS_INERROR || st == PQTRANS_ACTIVE;
}

Result Connection::check(pg_result* raw) {
    Result res(raw);  // owns raw from here on, whatever happens below
    if (raw == nullptr || PQstatus(conn_.get()) != CONNECTION_OK)
        throw ConnectionError(
            fmt::format("connection lost: {}", trimmed(PQerrorMessage(conn_.get()))));
    auto status = PQresultStatus(raw);
    if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK) return res;
    if (status == PGRES_EMPTY_QUERY) throw Error("", "empty query: the SQL text has no statement");
    if (status == PGRES_COPY_OUT || status == PGRES_COPY_IN || status == PGRES_COPY_BOTH) {
        end_copy(status);
        throw Error("", "COPY to or from the client is not supported; the COPY was ended");
    }
    if (status != PGRES_BAD_RESPONSE && status != PGRES_NONFATAL_ERROR &&
        status != PGRES_FATAL_ERROR)
        throw Error("", fmt::format("unexpected result status {}", PQresStatus(status)));
    std::string state = field(raw, PG_DIAG_SQLSTATE);
    if (state == kStatementUnknown) prepared_.clear();
    std::string msg = field(raw, PG_DIAG_MESSAGE_PRIMARY);
    if (msg.empty()) msg = trimmed(PQresultErrorMessage(raw));
    if (state.rfind("08", 0) == 0 || state == "57P01" || state == "57P02" || state == "57P03")
        throw ConnectionError(msg);
    throw Error(state, msg, field(raw, PG_DIAG_MESSAGE_DETAIL), field(raw, PG_DIAG_MESSAGE_HINT));
}

// Ends a COPY that exec() started, so that the connection can run statements again: the rows a
// COPY TO STDOUT sends are read and dropped, a COPY FROM STDIN is ended as failed, and a
// replication COPY drops the connection.
void Connection::end_copy(int status) {
    pg_conn* c = conn_.get();
    if (status == PGRES_COPY_OUT) {
        char* row = nullptr;
        while (PQgetCopyData(c, &row, 0) > 0) PQfreemem(row);
    } else if (status == PGRES_COPY_IN) {
        PQputCopyEnd(c, "COPY FROM STDIN is not supported by hopper::Connection");
    } else {
        conn_.reset();
        return;
    }
    while (pg_result* more = PQgetResult(c)) PQclear(more);
}

namespace {
struct ParamArrays {
    std::vector<const char*> values;
    explicit ParamArrays(const std::vector<Param>& params) {
        values.reserve(params.size());
        for (const auto& p : params) values.push_back(p ? p->c_str() : nullptr);
    }
};
}  // namespace

Result Connection::exec(const std::string& sql, const std::vector<Param>& params) {
    pg_conn* c = live();
    ParamArrays a(params);
    return check(PQexecParams(c, sql.c_str(), static_cast<int>(params.size()), nullptr,
                              a.values.data(), nullptr, nullptr, 0));
}

Result Connection::exec_prepared(const char* name, const char* sql,
                                 const std::vector<Param>& params) {
    pg_conn* c = live();
    prepare_once(name, sql, params.size());
    ParamArrays a(params);
    try {
        return check(PQexecPrepared(c, name, static_cast<int>(params.size()), a.values.data(),
                                    nullptr, nullptr, 0));
    } catch (const ConnectionError&) {
        throw;
    } catch (const Error& e) {
        // DEALLOCATE ALL or DISCARD ALL dropped the statement (check() has forgotten them all).
        // Outside a transaction it is prepared again and run once more; inside one, the error
        // has aborted the transaction, and the statement is prepared again after it.
        if (e.sqlstate() != kStatementUnknown || in_transaction()) throw;
        prepare_once(name, sql, params.size());
        return check(PQexecPrepared(c, name, static_cast<int>(params.size()), a.values.data(),
                                    nullptr, nullptr, 0));
    }
}

void Connection::prepare_once(const char* name, const char* sql, size_t n_params) {
    if (prepared_.count(name) != 0) return;
    try {
        check(PQprepare(conn_.get(), name, sql, static_cast<int>(n_params), nullptr));
    } catch (const Error& e) {
        // Prepared already: a 26000 from someone else's statement (a handler's EXECUTE of a
        // plan gone with a reconnect) made check() forget ours, which are still there. Each
        // name always holds the same SQL. Inside a transaction the refusal has aborted it: the
        // name is remembered and the error stands.
        if (e.sqlstate() != kStatementExists) throw;
        prepared_.insert(name);
        if (in_transaction()) throw;
        return;
    }
    prepared_.insert(name);
}

void Connection::send_prepared(const char* name, const char* sql,
                               const std::vector<Param>& params) {
    pg_conn* c = live();
    prepare_once(name, sql, params.size());
    ParamArrays a(params);
    if (PQsendQueryPrepared(c, name, static_cast<int>(params.size()), a.values.data(), nullptr,
                            nullptr, 0) == 0)
        throw ConnectionError(
            fmt::format("could not send: {}", trimmed(PQerrorMessage(conn_.get()))));
}

bool Connection::busy() {
    live();
    if (PQconsumeInput(conn_.get()) == 0)
        throw ConnectionError(
            fmt::format("connection lost: {}", trimmed(PQerrorMessage(conn_.get()))));
    return PQisBusy(conn_.get()) != 0;
}

Result Connection::finish() {
    live();
    pg_result* first = PQgetResult(conn_.get());
    // libpq wants every result read (the last is NULL) before the next statement is sent.
    while (pg_result* more = PQgetResult(conn_.get())) PQclear(more);
    return check(first);
}

bool Connection::cancel() const {
    if (!conn_) return false;
    struct FreeCancel {
        void operator()(PGcancel* c) const noexcept { PQfreeCancel(c); }
    };
    std::unique_ptr<PGcancel, FreeCancel> c(PQgetCancel(conn_.get()));
    char err[256];
    return c && PQcancel(c.get(), err, sizeof err) != 0;
}

std::string Connection::escape_identifier(std::string_view name) const {
    std::unique_ptr<char, FreeMem> q(PQescapeIdentifier(conn_.get(), name.data(), name.size()));
    if (!q) throw Error("22023", trimmed(PQerrorMessage(conn_.get())));
    return q.get();
}

void Connection::listen(std::string_view channel) {
    exec("LISTEN " + escape_identifier(channel));
}

void Connection::unlisten(std::string_view channel) {
    exec("UNLISTEN " + escape_identifier(channel));
}

std::vector<Notification> Connection::notifications() {
    std::vector<Notification> out;
    if (conn_) {
        if (PQconsumeInput(conn_.get()) == 0)
            throw ConnectionError(
                fmt::format("connection lost: {}", trimmed(PQerrorMessage(conn_.get()))));
        while (true) {
            std::unique_ptr<PGnotify, FreeMem> n(PQnotifies(conn_.get()));
            if (!n) break;
            out.push_back({n->relname, n->extra ? n->extra : "", n->be_pid});
        }
    }
    if (put_back_.empty()) return out;
    put_back_.insert(put_back_.end(), std::make_move_iterator(out.begin()),
                     std::make_move_iterator(out.end()));
    return std::exchange(put_back_, {});
}

void Connection::put_back(std::vector<Notification> unread) {
    unread.insert(unread.end(), std::make_move_iterator(put_back_.begin()),
                  std::make_move_iterator(put_back_.end()));
    put_back_ = std::move(unread);
}

bool Connection::wait(std::chrono::milliseconds timeout, int extra_fd) {
    if (!put_back_.empty()) return true;
    pollfd fds[2] = {{PQsocket(conn_.get()), POLLIN, 0}, {extra_fd, POLLIN, 0}};
    int nfds = extra_fd >= 0 ? 2 : 1;
    int ms = static_cast<int>(std::clamp<int64_t>(timeout.count(), 0, INT_MAX));
    int r = ::poll(fds, nfds, ms);
    if (r < 0 && errno != EINTR) throw ConnectionError("poll failed on the connection socket");
    return r > 0;
}

int Connection::backend_pid() const {
    return PQbackendPID(conn_.get());
}
int Connection::socket() const {
    return PQsocket(conn_.get());
}

}  // namespace hopper
