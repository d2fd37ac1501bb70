// Client::wait_for: LISTEN for "hopper:done", with job_status before waiting (the job may have
// finished before we listened) and on a poll tick: queues send "hopper:done" only when they asked
// for it (queue_set_notify_done), and a notification can be missed (hopper.notify off, a
// reconnect). A second between polls keeps a waiter's cost at one small query a second.
// The connection is the caller's: a LISTEN they made stays, and the notifications read here that
// are not wait_for's own go back to them (Connection::put_back).
#include <algorithm>
#include <optional>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "deadline.hpp"
#include "hopper/client.hpp"

namespace hopper {

namespace {

constexpr const char* kDoneChannel = "hopper:done";
constexpr std::chrono::milliseconds kPollEvery{1000};

// How job_status's P0002 for a job found nowhere begins its DETAIL when the id was issued
// (jobs::kIssuedDetail in the extension): the job may have finished on a queue that keeps no
// history. An id never issued has no such DETAIL.
constexpr std::string_view kIssuedDetail = "The id was issued";

// Whether a "hopper:done" payload ({"id": N, ...}) names job `id`.
bool names_job(const std::string& payload, int64_t id) {
    auto pos = payload.find("\"id\"");
    if (pos == std::string::npos) return true;  // unreadable: check the job to be sure
    pos = payload.find(':', pos);
    if (pos == std::string::npos) return true;
    ++pos;
    while (pos < payload.size() && payload[pos] == ' ') ++pos;
    size_t end = pos;
    while (end < payload.size() && payload[end] >= '0' && payload[end] <= '9') ++end;
    return payload.compare(pos, end - pos, std::to_string(id)) == 0;
}

// LISTENs on "hopper:done" unless the session does already (the caller's own LISTEN stays, and
// so do the "hopper:done" notifications it brings), reads the notifications, and on leaving
// UNLISTENs what it added and puts back for the caller all it read but its own.
class DoneListener {
  public:
    // `listen` false: in a transaction, where a LISTEN would start only at its commit.
    DoneListener(Connection& c, bool listen) : c_(c), started_(!listen) {}
    DoneListener(const DoneListener&) = delete;
    DoneListener& operator=(const DoneListener&) = delete;

    // LISTENs unless it has already: called before each look, on a connection made again if it
    // was lost, so that a connection lost before the first statement (an idle session ended by
    // idle_session_timeout, a restart or a failover while the caller's Client sat idle) is made
    // again like one lost during the wait. Throws ConnectionError when it is lost meanwhile.
    void start() {
        if (started_) return;
        own_ =
            !c_.exec_prepared("hopper_wait_listening",
                              "SELECT $1 = ANY (ARRAY(SELECT pg_catalog.pg_listening_channels()))",
                              {std::string(kDoneChannel)})
                 .boolean(0, 0);
        if (own_) c_.listen(kDoneChannel);
        started_ = true;
    }
    ~DoneListener() {
        try {
            // On a connection that is gone this only forgets the LISTEN, which went with it: a
            // reconnect must not make it again.
            if (own_ && !c_.in_transaction()) {
                c_.unlisten(kDoneChannel);
                if (c_.ok()) read(std::nullopt);  // some may have come in with the UNLISTEN's reply
            }
        } catch (...) {
            // The connection was lost meanwhile; so is the LISTEN.
        }
        try {
            c_.put_back(std::move(theirs_));
        } catch (...) {
            // Out of memory: they are lost.
        }
    }

    // Reads what has arrived; whether a "hopper:done" names job `id`.
    bool read(std::optional<int64_t> id) {
        bool ours = false;
        for (Notification& n : c_.notifications()) {
            bool done = n.channel == kDoneChannel;
            if (done && id && names_job(n.payload, *id)) ours = true;
            if (!(done && own_)) theirs_.push_back(std::move(n));
        }
        return ours;
    }

  private:
    Connection& c_;
    bool started_;
    bool own_ = false;
    std::vector<Notification> theirs_;
};

}  // namespace

std::optional<JobInfo> Client::wait_for(int64_t id, Duration timeout) {
    ensure_connected();
    // Each look of a REPEATABLE READ or SERIALIZABLE transaction reads the snapshot of its first:
    // the job would never be seen to change, and the wait would last its whole timeout (for ever
    // with Duration::max()).
    if (conn_.in_transaction()) {
        std::string isolation(
            conn_.exec("SELECT pg_catalog.current_setting('transaction_isolation')").text(0, 0));
        if (isolation == "repeatable read" || isolation == "serializable")
            throw Error(
                "25001",
                fmt::format("wait_for cannot see job {} change inside a {} transaction, "
                            "which reads one snapshot: wait outside it",
                            id, isolation == "serializable" ? "SERIALIZABLE" : "REPEATABLE READ"));
    }
    // Inside a transaction a LISTEN starts only at its commit, too late to hear anything, and
    // would outlive this call: the job is polled instead.
    DoneListener listener(conn_, !conn_.in_transaction());

    // A job seen once and then gone finished on a queue that keeps no history (or its queue was
    // dropped): "does not exist" would read as a wrong id. So may one never seen, when the server
    // says its id was issued: it may have finished before the first look.
    bool seen = false;
    auto status = [&] {
        try {
            JobInfo info = job_status(id);
            seen = true;
            return info;
        } catch (const Error& e) {
            if (e.sqlstate() != sqlstate::kNoData) throw;
            if (seen)
                throw Error(e.sqlstate(),
                            fmt::format("job {} is gone: it finished on a queue that keeps no "
                                        "history, so how it ended is not known (or its queue was "
                                        "dropped)",
                                        id));
            if (e.detail().rfind(kIssuedDetail, 0) != 0) throw;  // never issued: a wrong id
            throw Error(e.sqlstate(),
                        fmt::format("job {} is gone: it finished on a queue that keeps no "
                                    "history, so how it ended is not known (or its queue was "
                                    "dropped, or the push that drew its id did not commit)",
                                    id));
        }
    };
    // A connection lost outside a transaction (a server restart, a failover) does not end the
    // wait, which is for the job: each poll connects again (LISTENing again), until the deadline,
    // also when it was lost before the first statement. Inside one, the transaction went with the
    // connection, and the loss is the caller's.
    const bool in_transaction = conn_.in_transaction();
    auto look = [&]() -> std::optional<JobInfo> {
        try {
            ensure_connected();
            listener.start();
            return status();
        } catch (const ConnectionError&) {
            if (in_transaction) throw;
            return std::nullopt;
        }
    };
    using SteadyClock = std::chrono::steady_clock;
    const auto deadline = internal::deadline_after(timeout);
    while (true) {
        std::optional<JobInfo> info = look();
        if (info && is_final(info->state)) return info;
        // The poll is kept to its pace by the clock, not by a quiet second: other queues' jobs
        // finishing more often than that would otherwise keep the job from being looked at.
        const auto next_poll = SteadyClock::now() + kPollEvery;
        bool ours = false;
        while (!ours) {
            auto now = SteadyClock::now();
            if (now >= deadline) {
                // Not a reconnect at the deadline: without connect_timeout in the connection
                // string, a server that drops packets would hold it up for TCP's own timeout.
                if (!conn_.ok()) return std::nullopt;
                std::optional<JobInfo> last = look();
                if (last && is_final(last->state)) return last;
                return std::nullopt;
            }
            if (now >= next_poll) break;
            auto until = std::min(deadline, next_poll);
            try {
                // On a lost connection (no socket) this sleeps until the next poll.
                conn_.wait(std::chrono::ceil<std::chrono::milliseconds>(until - now));
                ours = listener.read(id);
            } catch (const ConnectionError&) {
                if (in_transaction) throw;
                std::this_thread::sleep_until(until);  // not a busy loop on a socket at EOF
            }
        }
    }
}

}  // namespace hopper
