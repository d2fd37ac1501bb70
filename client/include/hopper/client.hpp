// The queue's SQL API as C++ calls: each method runs the matching hopper.* function through a
// prepared statement on this client's connection (an unnamed statement behind a connection
// pooler: Connection::pooled) and returns typed results.
//
// A Client is one connection: use it from one thread at a time. Calls made inside a Transaction
// are part of it, which is how a job is pushed atomically with the caller's own rows.
#pragma once

#include <cstdint>
#include <charconv>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "hopper/connection.hpp"
#include "hopper/error.hpp"
#include "hopper/types.hpp"

namespace hopper {

namespace detail {
inline Param to_param(std::nullopt_t) {
    return std::nullopt;
}
inline Param to_param(const std::string& s) {
    return s;
}
inline Param to_param(std::string_view s) {
    return std::string(s);
}
inline Param to_param(const char* s) {
    return s ? Param(s) : std::nullopt;
}
// A char is one character of text, not its code (the arithmetic overload would send 'a' as 97).
inline Param to_param(char c) {
    return std::string(1, c);
}
inline Param to_param(bool b) {
    return std::string(b ? "true" : "false");
}
template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
Param to_param(T v) {
    if constexpr (std::is_floating_point_v<T>) {
        // The shortest text that reads back as the same value, in any locale: std::to_string
        // keeps 6 decimals (1e-9 went as 0) and writes the locale's decimal comma.
        char buf[64];
        auto r = std::to_chars(buf, buf + sizeof buf, v);
        return std::string(buf, r.ptr);
    } else {
        return std::to_string(v);
    }
}
template <typename T>
Param to_param(const std::optional<T>& v) {
    return v ? to_param(*v) : std::nullopt;
}
}  // namespace detail

class Client {
  public:
    // conninfo: "host=... dbname=..." or a postgresql:// URL; empty means the PG* environment.
    explicit Client(std::string conninfo = {});

    // Queues.
    bool queue_create(const std::string& queue, const QueueOptions& options = {});
    bool queue_drop(const std::string& queue);
    void queue_pause(const std::string& queue);
    void queue_resume(const std::string& queue);
    int64_t queue_purge(const std::string& queue);

    // Producers. Payloads are JSON object text.
    int64_t push(const std::string& queue, const std::string& payload,
                 const PushOptions& options = {});
    // Ids in payload order (a dedup hit returns the existing job's id in its slot).
    std::vector<int64_t> push_batch(const std::string& queue,
                                    const std::vector<std::string>& payloads,
                                    const BatchPushOptions& options = {});

    // Workers. A stale lease token is news, not an error: false / std::nullopt.
    std::vector<Job> pull(const std::string& queue, const PullOptions& options = {});
    // The same pull without blocking the caller, for a waiting pull (PullOptions::wait) next to
    // other work: begin_pull sends it; the caller waits for connection().socket() to be readable
    // until pull_ready() is true, then finish_pull() returns the jobs. cancel_pull() ends the wait
    // early: finish_pull() then returns no jobs, or the ones claimed before the cancel arrived.
    // Nothing else may run on this client in between: a call that does throws std::logic_error, as
    // do pull_ready and finish_pull without a pull begun.
    void begin_pull(const std::string& queue, const PullOptions& options);
    bool pull_ready();
    std::vector<Job> finish_pull();
    void cancel_pull();
    bool complete(int64_t id, int64_t lease_token, const std::optional<std::string>& result = {});
    // Completes many held jobs in one statement (queue_complete_many); returns the ids completed,
    // in the order given: a job whose lease was lost is left out. `results` is empty (no results)
    // or has one element per id.
    std::vector<int64_t> complete_many(const std::vector<int64_t>& ids,
                                       const std::vector<int64_t>& lease_tokens,
                                       const std::vector<std::optional<std::string>>& results = {});
    // complete_many, then pull, in one statement: one round trip and one commit for a worker that
    // finishes a batch and takes the next. The ids completed are stored in `completed`.
    std::vector<Job> complete_many_and_pull(const std::vector<int64_t>& ids,
                                            const std::vector<int64_t>& lease_tokens,
                                            const std::vector<std::optional<std::string>>& results,
                                            const std::string& queue, const PullOptions& options,
                                            std::vector<int64_t>& completed);
    // The job's new state (Available, Scheduled or Dead), or nullopt if the lease was lost.
    std::optional<JobState> fail(int64_t id, int64_t lease_token, const std::string& error,
                                 const FailOptions& options = {});
    // false: the job is no longer ours (lease expired and taken over, or cancelled): stop.
    bool heartbeat(int64_t id, int64_t lease_token, std::optional<Duration> extend = {});
    bool progress(int64_t id, int64_t lease_token, double fraction,
                  const std::optional<std::string>& detail = {});
    bool release(int64_t id, int64_t lease_token);
    // Takes jobs in the open Transaction (queue_take): they are completed when it commits and
    // untouched if it rolls back. No lease: lease_token is 0 and lease_until left at its default.
    // Outside a Transaction each call commits at once, so a crash after it loses the jobs.
    std::vector<Job> take(const std::string& queue, const TakeOptions& options = {});
    // The work of a taken job failed: counts the attempt and keeps the error (queue_fail_taken),
    // so the job is retried with backoff or dies after its last attempt instead of being taken
    // again at once. Best in the taking Transaction, after rolling the work back to a savepoint
    // made after the take: the job is put back and never leaves your hands. After the take
    // itself rolled back it works too, but another taker may run the job in between. The job's
    // new state, or nullopt when it is no longer available (another taker finished it meanwhile).
    std::optional<JobState> fail_taken(int64_t id, const std::string& error,
                                       const FailOptions& options = {},
                                       const std::optional<std::string>& worker = {});

    // Operators.
    bool cancel(int64_t id);
    bool retry(int64_t id);          // dead or cancelled -> available; other states: Error 55000
    JobInfo job_status(int64_t id);  // unknown id: Error P0002
    std::vector<QueueStat> stats(const std::optional<std::string>& queue = {});
    // A queue's jobs, newest first.
    std::vector<JobInfo> jobs(const std::string& queue, std::optional<JobState> state = {},
                              int limit = 100);

    // Waits until the job is completed, dead or cancelled: LISTENs on "hopper:done" (sent only for
    // queues with hopper.queue_set_notify_done on) and polls the job once a second. Returns its
    // final status, or nullopt when the timeout passes first. Inside a REPEATABLE READ or
    // SERIALIZABLE transaction, whose snapshot would never show the job change, it throws Error
    // 25001 at once. A job found nowhere throws Error P0002: "job N is gone" when it finished on
    // a queue that keeps no history (seen during the wait, or its id issued, as job_status's
    // DETAIL says), "job N does not exist" for an id never issued.
    std::optional<JobInfo> wait_for(int64_t id, Duration timeout);

    // The caller's own SQL on this connection, parameters bound (never spliced):
    //   client.exec("INSERT INTO videos(path) VALUES ($1) RETURNING id", path);
    template <typename... Args>
    Result exec(const std::string& sql, const Args&... args) {
        return exec_params(sql, {detail::to_param(args)...});
    }
    Result exec_params(const std::string& sql, const std::vector<Param>& params);

    // Reconnects when the connection was lost outside a transaction; inside one, the transaction
    // is gone with the connection, so calls throw ConnectionError until it is rolled back.
    void reconnect();
    Connection& connection() { return conn_; }

  private:
    friend class Transaction;
    Result call(const char* name, const char* sql, const std::vector<Param>& params);
    void ensure_connected();
    // The session's client_encoding, for the array parameters built from the caller's text
    // (connecting first, should the connection be down).
    int client_encoding();

    Connection conn_;
    int tx_depth_ = 0;
    bool pull_cancelled_ = false;
    bool pull_sent_ = false;  // begin_pull sent a pull that finish_pull has not read
};

// BEGIN on construction, ROLLBACK on destruction unless commit() was called. Not nestable.
//   hopper::Transaction tx(client);
//   auto row = client.exec("INSERT INTO videos(path) VALUES ($1) RETURNING id", path);
//   client.push("transcode", payload);
//   tx.commit();
// The constructor throws Error 25001 when the client is in a Transaction already, or its
// connection in a transaction begun through exec.
class Transaction {
  public:
    explicit Transaction(Client& client);
    ~Transaction();
    Transaction(const Transaction&) = delete;
    Transaction& operator=(const Transaction&) = delete;

    // Throws Error 25P02 (and rolls back) when a statement failed inside the transaction, and
    // 25000 when a statement run through exec (COMMIT, ROLLBACK) ended it: what ran after that
    // was not part of it. When the COMMIT itself fails the transaction is over, except when it
    // could not be sent (std::logic_error: a begin_pull not finished): then it stays open, for
    // rollback() or the destructor.
    void commit();
    // Ends the transaction whatever stands in the way, without waiting on the server: with a
    // pull begun inside it still in flight, or should the ROLLBACK not go out, the connection is
    // closed, which makes the server roll back (the next call reconnects; a pull waiting in the
    // server ends there at the latest when its wait does, and its jobs roll back with the rest).
    // The destructor does the same.
    void rollback();

  private:
    void ended();
    Client& client_;
    bool open_ = true;
};

}  // namespace hopper
