// Connection: one PGconn, its prepared statements and its notifications.
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
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

enum class PoolerSetting { Auto, On, Off };

// HOPPER_POOLER, read at each connect (see Connection::pooled).
PoolerSetting pooler_setting() {
    const char* v = std::getenv("HOPPER_POOLER");
    std::string_view s = v ? v : "";
    if (s.empty() || s == "auto") return PoolerSetting::Auto;
    if (s == "on") return PoolerSetting::On;
    if (s == "off") return PoolerSetting::Off;
    throw std::invalid_argument(
        fmt::format("HOPPER_POOLER must be on, off or auto, not \"{}\"", s));
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
      cancel_(std::move(o.cancel_)),
      prepared_(std::move(o.prepared_)),
      on_connect_(std::move(o.on_connect_)),
      listening_(std::move(o.listening_)),
      put_back_(std::move(o.put_back_)),
      sent_(std::exchange(o.sent_, std::nullopt)),
      ready_(std::exchange(o.ready_, std::nullopt)),
      cancel_asked_(o.cancel_asked_.load()),
      pooled_(o.pooled_),
      moved_from_(std::exchange(o.moved_from_, true)) {}

Connection& Connection::operator=(Connection&& o) noexcept {
    if (this == &o) return *this;
    conninfo_ = std::move(o.conninfo_);
    conn_ = std::move(o.conn_);
    cancel_ = std::move(o.cancel_);
    prepared_ = std::move(o.prepared_);
    on_connect_ = std::move(o.on_connect_);
    listening_ = std::move(o.listening_);
    put_back_ = std::move(o.put_back_);
    sent_ = std::exchange(o.sent_, std::nullopt);
    ready_ = std::exchange(o.ready_, std::nullopt);
    cancel_asked_ = o.cancel_asked_.load();
    pooled_ = o.pooled_;
    moved_from_ = std::exchange(o.moved_from_, true);
    return *this;
}

Connection::~Connection() = default;

pg_conn* Connection::live() {
    if (moved_from_) throw std::logic_error("hopper::Connection used after it was moved from");
    if (!conn_) throw ConnectionError("not connected");
    return conn_.get();
}

// The connection, ready for a statement: libpq would refuse one while a sent statement's result
// is unread ("another command is already in progress"), and that is the caller's mistake, not a
// lost connection.
pg_conn* Connection::idle() {
    pg_conn* c = live();
    if (sent_)
        throw std::logic_error(
            "a statement sent before (Client::begin_pull, Connection::send_prepared) is still "
            "running: read its result first (finish_pull, finish)");
    return c;
}

void Connection::on_connect(std::string sql) {
    if (ok()) exec(sql);
    on_connect_.push_back(std::move(sql));
}

void Connection::connect() {
    if (moved_from_) throw std::logic_error("hopper::Connection used after it was moved from");
    const PoolerSetting pooler = pooler_setting();
    prepared_.clear();
    sent_.reset();
    ready_.reset();
    pooled_ = pooler == PoolerSetting::On;
    cancel_.reset();
    conn_.reset(PQconnectdb(conninfo_.c_str()));
    if (!conn_) throw ConnectionError("out of memory while connecting");
    if (PQstatus(conn_.get()) != CONNECTION_OK)
        throw ConnectionError(
            fmt::format("could not connect: {}", trimmed(PQerrorMessage(conn_.get()))));
    // Made here, in the connection's own thread: PQgetCancel reads (and on a bad setting writes)
    // the PGconn, which another thread must not touch while this one runs a statement on it.
    cancel_.reset(PQgetCancel(conn_.get()), PQfreeCancel);
    // Silence NOTICEs (e.g. "extension already exists") that libpq would print to stderr.
    PQsetNoticeProcessor(
        conn_.get(), [](void*, const char*) {}, nullptr);
    // PgBouncer announces a pid of its own making; the server's is another.
    if (pooler == PoolerSetting::Auto)
        pooled_ = exec("SELECT pg_catalog.pg_backend_pid()").int64(0, 0) != backend_pid();
    for (const std::string& sql : on_connect_) exec(sql);
    for (const std::string& channel : listening_) exec("LISTEN " + escape_identifier(channel));
}

void Connection::reconnect() {
    connect();
}

void Connection::close() {
    live();
    prepared_.clear();
    sent_.reset();
    ready_.reset();
    cancel_.reset();
    conn_.reset();
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
        // feature_not_supported, as the server says of what it cannot do: a caller branching on
        // the SQLSTATE finds a refusal, not an error without a code.
        throw Error("0A000", "COPY to or from the client is not supported; the COPY was ended");
    }
    if (status != PGRES_BAD_RESPONSE && status != PGRES_NONFATAL_ERROR &&
        status != PGRES_FATAL_ERROR)
        throw Error("", fmt::format("unexpected result status {}", PQresStatus(status)));
    // The connection is up: whatever its SQLSTATE (a dblink's 08001 included), this is an error
    // of the statement.
    std::string state = field(raw, PG_DIAG_SQLSTATE);
    std::string msg = field(raw, PG_DIAG_MESSAGE_PRIMARY);
    if (msg.empty()) msg = trimmed(PQresultErrorMessage(raw));
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
    // Text parameters go as C strings: a NUL byte would silently end the value there (a payload
    // cut short, two dedup keys made equal). Text cannot hold one anyway, so it is refused before
    // anything is sent, as the server refuses bytes it cannot store (22021).
    explicit ParamArrays(const std::vector<Param>& params) {
        values.reserve(params.size());
        for (const auto& p : params) {
            if (p && p->find('\0') != std::string::npos)
                throw Error(sqlstate::kCharacterNotInRepertoire,
                            fmt::format("parameter ${} contains a NUL byte, which text cannot "
                                        "hold",
                                        values.size() + 1));
            values.push_back(p ? p->c_str() : nullptr);
        }
    }
};

bool unknown_statement(const pg_result* r) {
    return PQresultStatus(r) == PGRES_FATAL_ERROR &&
           field(r, PG_DIAG_SQLSTATE) == kStatementUnknown;
}
}  // namespace

Result Connection::exec(const std::string& sql, const std::vector<Param>& params) {
    pg_conn* c = idle();
    ParamArrays a(params);
    return check(PQexecParams(c, sql.c_str(), static_cast<int>(params.size()), nullptr,
                              a.values.data(), nullptr, nullptr, 0));
}

Result Connection::exec_prepared(const char* name, const char* sql,
                                 const std::vector<Param>& params) {
    pg_conn* c = idle();
    ParamArrays a(params);
    // Behind a pooler a named statement belongs to whichever server session it was prepared in.
    if (pooled_)
        return check(PQexecParams(c, sql, static_cast<int>(params.size()), nullptr, a.values.data(),
                                  nullptr, nullptr, 0));
    prepare_once(name, sql, params.size());
    try {
        return check(PQexecPrepared(c, name, static_cast<int>(params.size()), a.values.data(),
                                    nullptr, nullptr, 0));
    } catch (const ConnectionError&) {
        throw;
    } catch (const Error& e) {
        // DEALLOCATE or DISCARD ALL dropped this statement: it is forgotten (and only it: a 26000
        // of another statement says nothing about ours). Outside a transaction it is prepared
        // again and run once more; inside one, the error has aborted the transaction, and the
        // statement is prepared again after it.
        if (e.sqlstate() != kStatementUnknown) throw;
        prepared_.erase(name);
        if (in_transaction()) throw;
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
        // Prepared already, by the caller's own PREPARE of the same name: each of our names
        // always holds the same SQL, so it is used. Inside a transaction the refusal has aborted
        // it: the name is remembered and the error stands.
        if (e.sqlstate() != kStatementExists) throw;
        prepared_.insert(name);
        if (in_transaction()) throw;
        return;
    }
    prepared_.insert(name);
}

void Connection::send_prepared(const char* name, const char* sql,
                               const std::vector<Param>& params) {
    pg_conn* c = idle();
    ParamArrays a(params);
    if (!pooled_) prepare_once(name, sql, params.size());  // see exec_prepared
    // Cleared before the send: a cancel asked from another thread once the statement is out must
    // stay asked (a pull sent again after a 26000 would otherwise run uncancelled).
    cancel_asked_ = false;
    const int n = static_cast<int>(params.size());
    if ((pooled_ ? PQsendQueryParams(c, sql, n, nullptr, a.values.data(), nullptr, nullptr, 0)
                 : PQsendQueryPrepared(c, name, n, a.values.data(), nullptr, nullptr, 0)) == 0)
        throw ConnectionError(
            fmt::format("could not send: {}", trimmed(PQerrorMessage(conn_.get()))));
    // A copy of a few short parameters, beside a round trip that may wait in the server.
    sent_ = Sent{name, sql, params};
}

// libpq wants every result read (the last is NULL) before the next statement is sent.
void Connection::drain() {
    while (pg_result* more = PQgetResult(conn_.get())) PQclear(more);
}

// The sent statement failed with 26000 (DEALLOCATE or DISCARD ALL dropped it): as exec_prepared
// does, it is forgotten and, outside a transaction, prepared and sent again, once, unless a
// cancel was asked for. Its results have been read. False leaves `first` to be reported.
bool Connection::send_again(const Result& first) {
    if (pooled_ || !sent_ || !first.res_ || !unknown_statement(first.res_.get())) return false;
    prepared_.erase(sent_->name);
    if (sent_->sent_again || cancel_asked_ || in_transaction() || !ok()) return false;
    try {
        prepare_once(sent_->name, sent_->sql, sent_->params.size());
    } catch (const Error&) {
        return false;  // the 26000 is reported, or the lost connection check() finds
    }
    ParamArrays a(sent_->params);
    if (PQsendQueryPrepared(conn_.get(), sent_->name, static_cast<int>(sent_->params.size()),
                            a.values.data(), nullptr, nullptr, 0) == 0)
        return false;
    sent_->sent_again = true;
    return true;
}

bool Connection::busy() {
    live();
    if (ready_) return false;
    if (PQconsumeInput(conn_.get()) == 0)
        throw ConnectionError(
            fmt::format("connection lost: {}", trimmed(PQerrorMessage(conn_.get()))));
    if (PQisBusy(conn_.get()) != 0) return true;
    if (!sent_) return false;
    // The result is here: read it now, so that a statement the server lost is sent again
    // without the caller blocking on it in finish().
    Result first(PQgetResult(conn_.get()));
    if (first.res_ && unknown_statement(first.res_.get())) {
        drain();  // the error and ReadyForQuery travel together: no wait
        if (send_again(first)) return true;
    }
    ready_ = std::move(first);
    return false;
}

Result Connection::finish() {
    live();
    Result first = ready_ ? std::move(*ready_) : Result(PQgetResult(conn_.get()));
    ready_.reset();
    drain();
    if (send_again(first)) {
        first = Result(PQgetResult(conn_.get()));
        drain();
    }
    sent_.reset();
    return check(first.res_.release());
}

bool Connection::cancel() const {
    if (!conn_) return false;
    cancel_asked_ = true;
    return canceller().cancel();
}

Connection::Canceller Connection::canceller() const {
    Canceller c;
    c.cancel_ = cancel_;
    return c;
}

bool Connection::Canceller::cancel() const {
    char err[256];
    return cancel_ && PQcancel(cancel_.get(), err, sizeof err) != 0;
}

std::string Connection::escape_identifier(std::string_view name) const {
    std::unique_ptr<char, FreeMem> q(PQescapeIdentifier(conn_.get(), name.data(), name.size()));
    if (!q) throw Error("22023", trimmed(PQerrorMessage(conn_.get())));
    return q.get();
}

void Connection::listen(std::string_view channel) {
    idle();  // a moved-from Connection has nothing to quote the name with
    exec("LISTEN " + escape_identifier(channel));
    if (std::find(listening_.begin(), listening_.end(), channel) == listening_.end())
        listening_.emplace_back(channel);
}

void Connection::unlisten(std::string_view channel) {
    if (moved_from_) throw std::logic_error("hopper::Connection used after it was moved from");
    // Forgotten first: on a connection that is gone the LISTEN went with it, and the next
    // reconnect must not make it again.
    listening_.erase(std::remove(listening_.begin(), listening_.end(), channel), listening_.end());
    if (!ok()) return;
    idle();
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

int Connection::server_pid() {
    if (!pooled_) return backend_pid();
    return static_cast<int>(exec("SELECT pg_catalog.pg_backend_pid()").int64(0, 0));
}
int Connection::client_encoding() const {
    return PQclientEncoding(conn_.get());
}

int Connection::socket() const {
    return PQsocket(conn_.get());
}

}  // namespace hopper
