// A worker survives a server restart: it backs off, reconnects, listens again and carries on.
// Needs HOPPER_TEST_CLUSTER (the cluster script the test runner exports) to restart the server.
#include <cstdlib>
#include <thread>

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

}  // namespace
}  // namespace hopper
