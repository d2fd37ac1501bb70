// One libpq connection and the results it returns, owned RAII-style. Parameters always travel
// separately from the SQL text (PQexecParams / PQexecPrepared), never spliced into it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

struct pg_conn;
struct pg_result;
struct pg_cancel;

namespace hopper {

// A bound parameter in text form; std::nullopt is SQL NULL.
using Param = std::optional<std::string>;

class Result {
  public:
    Result() = default;
    explicit Result(pg_result* res);

    int rows() const;
    int columns() const;
    // Column number by name; throws std::out_of_range when there is no such column.
    int column(const char* name) const;
    bool is_null(int row, int col) const;
    std::string_view text(int row, int col) const;  // "" for NULL
    std::optional<std::string> opt_text(int row, int col) const;
    int64_t int64(int row, int col) const;
    std::optional<int64_t> opt_int64(int row, int col) const;
    double float8(int row, int col) const;
    bool boolean(int row, int col) const;
    // Rows touched by INSERT/UPDATE/DELETE.
    int64_t affected_rows() const;

  private:
    friend class Connection;
    struct Free {
        void operator()(pg_result* r) const noexcept;
    };
    std::unique_ptr<pg_result, Free> res_;
};

struct Notification {
    std::string channel;
    std::string payload;
    int backend_pid = 0;
};

class Connection {
  public:
    // conninfo: "host=... dbname=..." or a postgresql:// URL; empty means the PG* environment.
    explicit Connection(std::string conninfo = {});
    Connection(Connection&&) noexcept;
    Connection& operator=(Connection&&) noexcept;
    ~Connection();

    // Runs one statement with parameters; throws Error (with SQLSTATE) or ConnectionError.
    // A parameter holding a NUL byte is refused before anything is sent (Error 22021): text
    // cannot carry one, and libpq would silently cut the value there.
    Result exec(const std::string& sql, const std::vector<Param>& params = {});
    // Same, through a statement prepared once per connection under `name`; behind a connection
    // pooler (pooled()), as an unnamed statement each time.
    Result exec_prepared(const char* name, const char* sql, const std::vector<Param>& params);

    // A statement that may wait in the server (a waiting pull), without blocking the caller:
    // send_prepared sends it, the caller polls socket() (wait()) until busy() turns false, then
    // finish() returns its result or throws its error. cancel() asks the server to end it early
    // (PQcancel); it then fails with SQLSTATE 57014, or returns normally if it finished first.
    // Until finish() has read the result, any other statement throws std::logic_error.
    void send_prepared(const char* name, const char* sql, const std::vector<Param>& params);
    bool busy();
    Result finish();
    bool cancel() const;

    // Cancels, from any thread, the statement the connection runs at that moment (PQcancel):
    // taken in the connection's own thread, it outlives a reconnect or the Connection itself,
    // and then reaches the old server session, or nothing. Through PgBouncer (1.18 and later) a
    // cancel reaches a server session only while the client's statement still runs there.
    class Canceller {
      public:
        bool cancel() const;  // false: the request could not be sent

      private:
        friend class Connection;
        std::shared_ptr<pg_cancel> cancel_;
    };
    Canceller canceller() const;

    // Connection is up (a lost connection is only noticed by the next call).
    bool ok() const;
    // Drops the connection and connects again; forgets prepared statements. Throws
    // std::logic_error on a moved-from Connection, which has no conninfo left to connect with.
    void reconnect();
    // Drops the connection without ending the transaction it may be in: the server rolls it back
    // (and a pooler drops the server session its client left inside one). ok() is false until
    // reconnect().
    void close();
    // Runs `sql` now and after every reconnect, so that a session setting (SET ...) outlives a
    // lost connection.
    void on_connect(std::string sql);
    // Inside BEGIN ... COMMIT (or an aborted transaction).
    bool in_transaction() const;

    // Whether the connection goes through a connection pooler such as PgBouncer, which may run
    // each transaction in another server session: found at each connect by asking the server for
    // its pg_backend_pid(), which differs from the pid the connection announced (backend_pid():
    // PgBouncer makes one up). The environment variable HOPPER_POOLER overrides it: `on` for a
    // pooler that passes the server's pid through, `off` to skip the check (one query per
    // connection) where there is none; `auto` (or unset) checks. Behind a pooler exec_prepared
    // and send_prepared send unnamed statements: a named one prepared in one server session is
    // unknown in the next (26000), and collides with the same name prepared there by another
    // client (42P05). The C++ workers do not bind their leases to such a session either.
    bool pooled() const { return pooled_; }
    // The pid of the server process serving the connection, for pg_cancel_backend and
    // pg_terminate_backend: backend_pid() directly; behind a pooler it is asked of the server (a
    // round trip), and holds only until the transaction it is asked in ends.
    int server_pid();

    // LISTEN / UNLISTEN with the channel quoted as an identifier ("hopper:jobs" needs quoting).
    // A channel listened on this way is listened on again after every reconnect (notifications
    // sent while the connection was down are lost: check what they would have told you), until
    // unlisten(), which on a lost connection only forgets it. Both count as called, even in a
    // transaction that then rolls back.
    void listen(std::string_view channel);
    void unlisten(std::string_view channel);
    // Reads what the server has sent and returns the notifications received so far, those put
    // back first.
    std::vector<Notification> notifications();
    // Hands notifications read but not meant for the reader (Client::wait_for looks for its own
    // among the caller's) back to the next notifications(), ahead of any received since.
    void put_back(std::vector<Notification> unread);
    // Waits until the server sends something, `extra_fd` becomes readable, or the timeout passes.
    // Returns true when something arrived (call notifications()), at once while any is put back.
    bool wait(std::chrono::milliseconds timeout, int extra_fd = -1);

    std::string escape_identifier(std::string_view name) const;
    // The session's client_encoding as libpq numbers it (PQclientEncoding; -1 without a
    // connection), for hopper::json::quote: the text sent is in that encoding, and in SJIS, BIG5,
    // GBK, GB18030, UHC and JOHAB the second byte of a character can be 0x5C, the backslash. No
    // round trip: the server reports the setting on connecting and on every change.
    int client_encoding() const;
    // The pid the connection announced (PQbackendPID): behind a pooler, not a server process.
    int backend_pid() const;
    int socket() const;
    pg_conn* raw() const { return conn_.get(); }

  private:
    struct Finish {
        void operator()(pg_conn* c) const noexcept;
    };
    // A statement send_prepared sent, kept until finish() reads its result, so that it can be
    // sent again should the server have lost its prepared statement.
    struct Sent {
        const char* name;
        const char* sql;
        std::vector<Param> params;
        bool sent_again = false;
    };
    void connect();
    Result check(pg_result* res);
    void prepare_once(const char* name, const char* sql, size_t n_params);
    pg_conn* live();
    pg_conn* idle();
    void end_copy(int status);
    void drain();
    bool send_again(const Result& first);

    std::string conninfo_;
    std::unique_ptr<pg_conn, Finish> conn_;
    std::shared_ptr<pg_cancel> cancel_;  // conn_'s, made at connect (see canceller())
    std::unordered_set<std::string> prepared_;
    std::vector<std::string> on_connect_;
    std::vector<std::string> listening_;  // channels listen() added, in the order they came
    std::vector<Notification> put_back_;
    std::optional<Sent> sent_;
    std::optional<Result> ready_;  // the sent statement's result, read by busy() for finish()
    // cancel() was called for the sent statement (perhaps from another thread): it is not sent
    // again.
    mutable std::atomic<bool> cancel_asked_{false};
    bool pooled_ = false;
    bool moved_from_ = false;
};

}  // namespace hopper
