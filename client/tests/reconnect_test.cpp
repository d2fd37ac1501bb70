// A worker survives a server restart: it backs off, reconnects, listens again and carries on.
// Needs HOPPER_TEST_CLUSTER (the cluster script the test runner exports) to restart the server.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "hopper/worker.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using hopper::test::conninfo;
using hopper::test::eventually;
using hopper::test::unique_queue;

namespace hopper {
namespace {

// Pushes with a fresh connection, retrying while the server is still coming back.
int64_t push_when_up(const std::string& queue) {
    int64_t id = 0;
    bool pushed = eventually(
        [&] {
            try {
                Client c(conninfo());
                id = c.push(queue, "{}");
                return true;
            } catch (const ConnectionError&) {
                return false;
            }
        },
        60s);
    EXPECT_TRUE(pushed) << "the server did not come back";
    return id;
}

bool completed(int64_t id) {
    try {
        Client c(conninfo());
        return c.job_status(id).state == JobState::Completed;
    } catch (const ConnectionError&) {
        return false;
    }
}

TEST(Reconnect, WorkerCarriesOnAfterServerRestart) {
    const char* cluster = std::getenv("HOPPER_TEST_CLUSTER");
    if (cluster == nullptr || *cluster == '\0')
        GTEST_SKIP() << "HOPPER_TEST_CLUSTER is not set (run through make test)";
    std::string q = unique_queue("restart");
    WorkerOptions o;
    o.conninfo = conninfo();
    o.queue = q;
    o.concurrency = 2;
    o.handle_signals = false;
    o.poll_interval = 1s;
    o.min_backoff = 100ms;
    o.max_backoff = 1s;
    o.log = [](const std::string&) {};
    Worker w(o);
    w.on_any([](JobContext&) {});
    std::thread t([&] { w.run(); });

    int64_t before = push_when_up(q);
    EXPECT_TRUE(eventually([&] { return completed(before); }, 60s));

    std::string cmd = fmt::format("\"{}\" restart >/dev/null 2>&1", cluster);
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

    int64_t after = push_when_up(q);
    EXPECT_TRUE(eventually([&] { return completed(after); }, 90s))
        << "the worker did not pick up work after the restart";
    // The client library reconnects by itself too, outside a transaction.
    Client c(conninfo());
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    EXPECT_TRUE(eventually(
        [&] {
            try {
                return c.job_status(after).state == JobState::Completed;
            } catch (const ConnectionError&) {
                return false;  // the first call after the restart notices the loss
            }
        },
        60s));
    w.stop();
    t.join();
    EXPECT_EQ(w.stats().completed, 2u);
}

// A restart closes the handler threads' idle connections, which look open until used: each thread
// reconnects before it hands its next job to its handler. (The first job of each thread after the
// restart met the lost connection at its handler's first statement, and failed an attempt.)
TEST(Reconnect, HandlersConnectionsComeBackBeforeTheirNextJob) {
    const char* cluster = std::getenv("HOPPER_TEST_CLUSTER");
    if (cluster == nullptr || *cluster == '\0')
        GTEST_SKIP() << "HOPPER_TEST_CLUSTER is not set (run through make test)";
    std::string q = unique_queue("restart_handlers");
    constexpr int kThreads = 3;
    {
        Client c(conninfo());
        QueueOptions qo;
        qo.max_attempts = 1;  // a job that fails once is dead
        c.queue_create(q, qo);
    }
    WorkerOptions o;
    o.conninfo = conninfo();
    o.queue = q;
    o.concurrency = kThreads;
    o.handle_signals = false;
    o.poll_interval = 1s;
    o.min_backoff = 100ms;
    o.max_backoff = 1s;
    o.log = [](const std::string&) {};
    Worker w(o);
    std::mutex m;
    std::condition_variable cv;
    int running = 0;
    w.on_any([&](JobContext& job) {
        job.client().exec("SELECT 1");
        // Before the restart, the jobs run side by side, so that every thread has its connection.
        std::unique_lock<std::mutex> lock(m);
        ++running;
        cv.notify_all();
        cv.wait_for(lock, 30s, [&] { return running >= kThreads; });
    });
    std::thread t([&] { w.run(); });

    std::vector<int64_t> before, after;
    for (int i = 0; i < kThreads; ++i) before.push_back(push_when_up(q));
    for (int64_t id : before) EXPECT_TRUE(eventually([&] { return completed(id); }, 60s));
    {
        std::lock_guard<std::mutex> lock(m);
        ASSERT_EQ(running, kThreads) << "the jobs did not run side by side";
    }

    std::string cmd = fmt::format("\"{}\" restart >/dev/null 2>&1", cluster);
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    for (int i = 0; i < kThreads; ++i) after.push_back(push_when_up(q));
    for (int64_t id : after) {
        std::optional<JobInfo> info;
        EXPECT_TRUE(eventually(
            [&] {
                try {
                    info = Client(conninfo()).job_status(id);
                    return info->state == JobState::Completed || info->state == JobState::Dead;
                } catch (const ConnectionError&) {
                    return false;
                }
            },
            90s));
        ASSERT_TRUE(info.has_value());
        EXPECT_EQ(info->state, JobState::Completed)
            << "job " << id << " pushed after the restart: " << info->last_error.value_or("");
    }
    w.stop();
    t.join();
    EXPECT_EQ(w.stats().completed, 2u * kThreads);
    EXPECT_EQ(w.stats().failed, 0u);
}

// wait_for outlives a restart of the server: its polls connect again, and the job finishing
// after the restart ends the wait. (It threw ConnectionError at the restart, and `hopper wait`
// exited 3.)
TEST(Reconnect, WaitForOutlivesAServerRestart) {
    const char* cluster = std::getenv("HOPPER_TEST_CLUSTER");
    if (cluster == nullptr || *cluster == '\0')
        GTEST_SKIP() << "HOPPER_TEST_CLUSTER is not set (run through make test)";
    std::string q = unique_queue("wait_restart");
    int64_t id = push_when_up(q);
    std::optional<JobInfo> waited;
    std::string error;
    std::thread waiter([&] {
        try {
            Client c(hopper::test::named_conninfo(q));
            waited = c.wait_for(id, 120s);
        } catch (const std::exception& e) {
            error = e.what();
        }
    });
    Client c(conninfo());
    EXPECT_TRUE(eventually([&] {
        return c.exec(
                    "SELECT count(*) FROM pg_catalog.pg_stat_activity "
                    "WHERE application_name = $1",
                    q)
                   .int64(0, 0) > 0;
    })) << "the wait did not begin";
    std::string cmd = fmt::format("\"{}\" restart >/dev/null 2>&1", cluster);
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    EXPECT_TRUE(eventually(
        [&] {
            try {
                Client worker(conninfo());
                std::vector<Job> jobs = worker.pull(q);
                return !jobs.empty() && worker.complete(jobs[0].id, jobs[0].lease_token);
            } catch (const ConnectionError&) {
                return false;  // the server is still coming back
            }
        },
        60s));
    waiter.join();
    EXPECT_EQ(error, "");
    ASSERT_TRUE(waited.has_value()) << "the wait timed out";
    EXPECT_EQ(waited->state, JobState::Completed);
}

// Shutdown with the server down: a handler that returns during the shutdown cannot report its
// job, and retrying the report must end by shutdown_timeout, not after its own minute; a handler
// still running at the deadline is told to stop, though its job cannot be released. The jobs are
// left to their leases (or, their sessions gone, to the reaper once the server is back).
TEST(Reconnect, ShutdownEndsByItsDeadlineWhileTheServerIsDown) {
    const char* cluster = std::getenv("HOPPER_TEST_CLUSTER");
    if (cluster == nullptr || *cluster == '\0')
        GTEST_SKIP() << "HOPPER_TEST_CLUSTER is not set (run through make test)";
    const std::string stop_cmd = fmt::format("\"{}\" stop >/dev/null 2>&1", cluster);
    const std::string start_cmd = fmt::format("\"{}\" start >/dev/null 2>&1", cluster);
    std::string q = unique_queue("down");
    WorkerOptions o;
    o.conninfo = conninfo();
    o.queue = q;
    o.concurrency = 2;
    o.handle_signals = false;
    o.min_backoff = 100ms;
    o.max_backoff = 1s;
    o.shutdown_timeout = 3s;
    o.log = [](const std::string&) {};
    Worker w(o);
    std::mutex mu;
    std::condition_variable cv;
    bool go = false;
    std::atomic<int> started{0};
    w.on("returns", [&](JobContext&) {
        ++started;
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return go; });
    });
    std::atomic<int> stopped_as{-1};
    w.on("runs_on", [&](JobContext& job) {
        ++started;
        job.wait_for_stop(60s);
        stopped_as = static_cast<int>(job.stop_reason());
    });
    test::Running<Worker> running(w);
    struct Release {  // however the test ends, the handler returns (then `running` ends run())
        std::mutex& mu;
        std::condition_variable& cv;
        bool& go;
        ~Release() {
            {
                std::lock_guard<std::mutex> lock(mu);
                go = true;
            }
            cv.notify_all();
        }
    } release{mu, cv, go};
    struct ServerBack {  // the later tests and the database's teardown need it
        const std::string& cmd;
        ~ServerBack() {
            if (std::system(cmd.c_str()) != 0) ADD_FAILURE() << "could not start the server";
        }
    } server_back{start_cmd};

    {
        Client c(conninfo());
        PushOptions returns, runs_on;
        returns.kind = "returns";
        runs_on.kind = "runs_on";
        c.push(q, "{}", returns);
        c.push(q, "{}", runs_on);
    }
    ASSERT_TRUE(eventually([&] { return started.load() == 2; }, 60s));
    ASSERT_EQ(std::system(stop_cmd.c_str()), 0) << stop_cmd;
    auto stopping = std::chrono::steady_clock::now();
    w.stop();
    std::this_thread::sleep_for(500ms);
    {
        std::lock_guard<std::mutex> lock(mu);
        go = true;  // its report fails: no server
    }
    cv.notify_all();
    running.stop();
    auto took = std::chrono::steady_clock::now() - stopping;
    EXPECT_LT(took, 3s + 2s) << "run() returned "
                             << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                             << " ms after stop(), past its shutdown_timeout of 3 s";
    EXPECT_EQ(stopped_as.load(), static_cast<int>(StopReason::Shutdown));
}

// A completion handed over to the fetch loop (batch_completions) whose connection is lost during
// the shutdown: a connection killed while idle looks open until it is used, so the shutdown's
// try meets the loss itself. The completion is made again once the connection is back, within
// the shutdown deadline. (Tried only once, the job was left running until its lease ran out, to
// be run again elsewhere.) Here a row lock holds each try until the test ends its session.
TEST(Reconnect, ShutdownMakesAgainACompletionCutByALostConnection) {
    std::string q = unique_queue("cut");
    WorkerOptions o;
    o.conninfo = hopper::test::named_conninfo(q);  // to find its sessions
    o.queue = q;
    o.concurrency = 1;
    o.handle_signals = false;
    o.batch_completions = true;
    o.session_bound = false;  // the reaper leaves the job alone when its sessions end
    o.min_backoff = 100ms;
    o.max_backoff = 1s;
    o.shutdown_timeout = 30s;
    o.log = [](const std::string&) {};
    Worker w(o);
    std::mutex mu;
    std::condition_variable cv;
    bool go = false;
    std::atomic<bool> started{false};
    w.on_any([&](JobContext&) {
        started = true;
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return go; });
    });
    test::Running<Worker> running(w);
    Client c(conninfo());
    Client locker(conninfo());
    struct Release {  // however the test ends, the row is let go (then `running` ends run())
        std::mutex& mu;
        std::condition_variable& cv;
        bool& go;
        Client& locker;
        ~Release() {
            {
                std::lock_guard<std::mutex> lock(mu);
                go = true;
            }
            cv.notify_all();
            try {
                locker.exec("ROLLBACK");
            } catch (const std::exception&) {
                // No transaction open.
            }
        }
    } release{mu, cv, go, locker};

    int64_t id = c.push(q, "{}");
    ASSERT_TRUE(eventually([&] { return started.load(); }, 60s));
    locker.exec("BEGIN");
    locker.exec("SELECT 1 FROM hopper.jobs WHERE id = $1 FOR UPDATE", id);
    {
        std::lock_guard<std::mutex> lock(mu);
        go = true;  // handed over to the fetch loop, whose completion waits for the row
    }
    cv.notify_all();
    // The worker's session whose completion waits for the row, other than those in `seen`.
    std::vector<int64_t> seen;
    auto waiting_completion = [&] {
        auto r = c.exec(
            "SELECT pid FROM pg_catalog.pg_stat_activity WHERE application_name = $1 "
            "AND state = 'active' AND query LIKE '%queue_complete_many%'",
            q);
        for (int i = 0; i < r.rows(); ++i) {
            int64_t pid = r.int64(i, 0);
            if (std::find(seen.begin(), seen.end(), pid) == seen.end()) {
                seen.push_back(pid);
                return true;
            }
        }
        return false;
    };
    ASSERT_TRUE(eventually(waiting_completion, 30s)) << "the fetch loop's completion never came";
    w.stop();
    // The fetch loop's try is cut: the shutdown sees the loss and reconnects before its own try.
    c.exec("SELECT pg_catalog.pg_terminate_backend($1)", seen.back());
    ASSERT_TRUE(eventually(waiting_completion, 30s)) << "the shutdown did not try the completion";
    // Its own try is cut too, with the connection it uses now.
    c.exec("SELECT pg_catalog.pg_terminate_backend($1)", seen.back());
    EXPECT_TRUE(eventually(waiting_completion, 10s))
        << "the shutdown did not make the completion again";
    locker.exec("ROLLBACK");
    running.stop();
    EXPECT_EQ(c.job_status(id).state, JobState::Completed);
    EXPECT_EQ(c.job_status(id).attempt, 1);
    EXPECT_EQ(w.stats().completed, 1u);
}

}  // namespace
}  // namespace hopper
