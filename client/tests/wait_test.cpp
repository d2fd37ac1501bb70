// wait_for: returns the final status as soon as the job finishes, by NOTIFY or by polling.
#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "hopper/client.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using hopper::test::conninfo;
using hopper::test::eventually;
using hopper::test::unique_queue;

namespace hopper {
namespace {

using Steady = std::chrono::steady_clock;

TEST(WaitFor, AlreadyFinishedReturnsAtOnce) {
    Client c(conninfo());
    std::string q = unique_queue("wait");
    int64_t id = c.push(q, "{}");
    auto j = c.pull(q).at(0);
    ASSERT_TRUE(c.complete(id, j.lease_token, std::string(R"({"n": 1})")));
    auto t0 = Steady::now();
    auto info = c.wait_for(id, 30s);
    ASSERT_TRUE(info);
    EXPECT_EQ(info->state, JobState::Completed);
    EXPECT_EQ(info->result, R"({"n": 1})");
    EXPECT_LT(Steady::now() - t0, 5s);
}

TEST(WaitFor, WakesWhenAnotherConnectionFinishesTheJob) {
    Client c(conninfo());
    std::string q = unique_queue("wait");
    int64_t id = c.push(q, "{}");
    auto done = std::async(std::launch::async, [&] {
        Client other(conninfo());
        auto j = other.pull(q).at(0);
        std::this_thread::sleep_for(300ms);
        FailOptions dead;
        dead.permanent = true;
        return other.fail(id, j.lease_token, "gave up", dead);
    });
    auto t0 = Steady::now();
    auto info = c.wait_for(id, 60s);
    ASSERT_TRUE(info);
    EXPECT_EQ(info->state, JobState::Dead);
    EXPECT_EQ(info->last_error, "gave up");
    EXPECT_LT(Steady::now() - t0, 30s);
    EXPECT_EQ(done.get(), JobState::Dead);
    // The client is usable afterwards and no longer listening.
    EXPECT_TRUE(c.connection().notifications().empty());
}

TEST(WaitFor, HearsAtOnceWhenTheQueueSendsDoneNotifications) {
    Client c(conninfo());
    std::string q = unique_queue("wait");
    int64_t id = c.push(q, "{}");
    c.exec("SELECT hopper.queue_set_notify_done($1, true)", q);
    auto done = std::async(std::launch::async, [&] {
        Client other(conninfo());
        auto j = other.pull(q).at(0);
        std::this_thread::sleep_for(100ms);
        return other.complete(id, j.lease_token);
    });
    auto t0 = Steady::now();
    auto info = c.wait_for(id, 60s);
    ASSERT_TRUE(info);
    EXPECT_EQ(info->state, JobState::Completed);
    // Without the notification the first poll comes a second after the wait began.
    EXPECT_LT(Steady::now() - t0, 950ms);
    EXPECT_TRUE(done.get());
}

TEST(WaitFor, PollsWhenNoNotificationComes) {
    Client c(conninfo());
    std::string q = unique_queue("wait");
    int64_t id = c.push(q, "{}");
    auto done = std::async(std::launch::async, [&] {
        Client other(conninfo());
        other.exec("SET hopper.notify = off");
        std::this_thread::sleep_for(200ms);
        return other.cancel(id);
    });
    auto info = c.wait_for(id, 60s);
    ASSERT_TRUE(info);
    EXPECT_EQ(info->state, JobState::Cancelled);
    EXPECT_TRUE(done.get());
}

// Other queues' jobs finishing more often than once a second kept the poll from ever coming:
// the wait for a job of a queue without `hopper:done` lasted until its timeout.
TEST(WaitFor, PollsWhileOtherJobsKeepFinishing) {
    Client c(conninfo());
    std::string q = unique_queue("wait");
    int64_t id = c.push(q, "{}");
    std::atomic<bool> stop{false};
    auto busy = std::async(std::launch::async, [&] {
        Client other(conninfo());
        while (!stop) {
            other.exec("SELECT pg_catalog.pg_notify('hopper:done', '{\"id\": 0}')");
            std::this_thread::sleep_for(200ms);
        }
    });
    auto done = std::async(std::launch::async, [&] {
        Client other(conninfo());
        other.exec("SET hopper.notify = off");
        std::this_thread::sleep_for(300ms);
        return other.cancel(id);
    });
    auto t0 = Steady::now();
    auto info = c.wait_for(id, 30s);
    auto took = Steady::now() - t0;
    stop = true;
    busy.get();
    ASSERT_TRUE(info);
    EXPECT_EQ(info->state, JobState::Cancelled);
    EXPECT_LT(took, 10s) << "waited for the timeout";
    EXPECT_TRUE(done.get());
}

TEST(WaitFor, TimesOut) {
    Client c(conninfo());
    std::string q = unique_queue("wait");
    int64_t id = c.push(q, "{}");
    auto t0 = Steady::now();
    EXPECT_FALSE(c.wait_for(id, 1500ms));
    auto took = Steady::now() - t0;
    EXPECT_GE(took, 1500ms);
    EXPECT_LT(took, 20s);
    EXPECT_EQ(c.job_status(id).state, JobState::Available);
}

TEST(WaitFor, UnknownJobIsAnError) {
    Client c(conninfo());
    try {
        c.wait_for(987654321, 5s);
        FAIL() << "waited for a job that does not exist";
    } catch (const Error& e) {
        EXPECT_EQ(e.sqlstate(), "P0002");
        EXPECT_NE(std::string(e.what()).find("job 987654321 does not exist"), std::string::npos)
            << e.what();
    }
}

// A queue that keeps no history forgets a job as it finishes: the wait says so rather than that
// the job does not exist, which reads as a wrong id.
TEST(WaitFor, AJobFinishedOnAQueueWithoutHistoryIsGoneNotUnknown) {
    Client c(conninfo());
    std::string q = unique_queue("wait");
    QueueOptions qo;
    qo.retention = Duration::zero();
    c.queue_create(q, qo);
    int64_t id = c.push(q, "{}");
    auto done = std::async(std::launch::async, [&] {
        Client other(conninfo());
        auto j = other.pull(q).at(0);
        // Long enough for the wait to have seen the job, which is what makes it "gone".
        std::this_thread::sleep_for(1500ms);
        return other.complete(j.id, j.lease_token);
    });
    try {
        c.wait_for(id, 20s);
        FAIL() << "a job no one can look up any more was reported";
    } catch (const Error& e) {
        EXPECT_EQ(e.sqlstate(), "P0002");
        EXPECT_NE(std::string(e.what()).find("keeps no history"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(done.get());
}

// A job that finished unkept before the wait's first look is gone too: the server says that its
// id was issued. It used to read "does not exist", as for a wrong id. So it does for the roles
// the extension grants, which read the sequence's last id.
TEST(WaitFor, AJobFinishedUnkeptBeforeTheFirstLookIsGoneNotUnknown) {
    Client c(conninfo());
    std::string q = unique_queue("wait");
    QueueOptions qo;
    qo.retention = Duration::zero();
    c.queue_create(q, qo);
    for (const char* role : {"", "hopper_producer", "hopper_worker"}) {
        int64_t id = c.push(q, "{}");
        auto j = c.pull(q).at(0);
        ASSERT_TRUE(c.complete(id, j.lease_token));
        Client waiter(conninfo());
        if (*role) waiter.exec(std::string("SET ROLE ") + role);
        try {
            waiter.wait_for(id, 5s);
            FAIL() << "a job no one can look up any more was reported (role " << role << ")";
        } catch (const Error& e) {
            EXPECT_EQ(e.sqlstate(), "P0002");
            std::string what = e.what();
            EXPECT_EQ(what.rfind(fmt::format("job {} is gone: it finished on a queue that keeps "
                                             "no history",
                                             id),
                                 0),
                      0u)
                << "role " << role << ": " << what;
        }
    }
}

// Duration::max() is "no timeout": now + max overflowed into the past and wait_for returned at
// once.
TEST(WaitFor, TheLongestTimeoutWaitsForTheJob) {
    Client c(conninfo());
    std::string q = unique_queue("wait");
    int64_t id = c.push(q, "{}");
    auto finisher = std::async(std::launch::async, [&] {
        Client other(conninfo());
        std::this_thread::sleep_for(300ms);
        auto j = other.pull(q).at(0);
        other.complete(id, j.lease_token);
    });
    auto info = c.wait_for(id, Duration::max());
    finisher.get();
    ASSERT_TRUE(info) << "wait_for gave up before the job finished";
    EXPECT_EQ(info->state, JobState::Completed);
}

// Inside a transaction a LISTEN starts at its commit; wait_for left it behind, and the connection
// received every "hopper:done" from then on.
TEST(WaitFor, InATransactionLeavesNoListenBehind) {
    Client c(conninfo());
    std::string q = unique_queue("wait");
    int64_t id = c.push(q, "{}");
    auto j = c.pull(q).at(0);
    ASSERT_TRUE(c.complete(id, j.lease_token));
    {
        Transaction tx(c);
        auto info = c.wait_for(id, 5s);
        ASSERT_TRUE(info);
        EXPECT_EQ(info->state, JobState::Completed);
        tx.commit();
    }
    EXPECT_EQ(c.exec("SELECT count(*) FROM pg_catalog.pg_listening_channels()").int64(0, 0), 0);
}

// Every poll of a REPEATABLE READ transaction reads its first snapshot: the job finished by
// another connection was never seen, and the wait lasted its whole timeout (for ever with
// Duration::max()).
TEST(WaitFor, InARepeatableReadTransactionIsRefusedAtOnce) {
    Client c(conninfo());
    std::string q = unique_queue("wait");
    int64_t id = c.push(q, "{}");
    for (const char* level : {"REPEATABLE READ", "SERIALIZABLE"}) {
        Transaction tx(c);
        c.exec(std::string("SET TRANSACTION ISOLATION LEVEL ") + level);
        auto t0 = Steady::now();
        try {
            c.wait_for(id, 3s);
            ADD_FAILURE() << "wait_for waited inside a " << level << " transaction";
        } catch (const Error& e) {
            EXPECT_EQ(e.sqlstate(), "25001") << e.what();
        }
        EXPECT_LT(Steady::now() - t0, 1s) << level;
    }
}

// The connection is the caller's: wait_for UNLISTENed "hopper:done" that the caller listened on
// itself, and dropped every notification it read that was not about its job.
TEST(WaitFor, LeavesTheCallersListensAndNotificationsAlone) {
    Client c(conninfo()), other(conninfo());
    std::string q = unique_queue("wait");
    const std::string app = q + ":app";
    c.queue_create(q);
    c.exec("SELECT hopper.queue_set_notify_done($1, true)", q);
    c.connection().listen("hopper:done");
    c.connection().listen(app);
    int64_t waited = c.push(q, "{}");
    int64_t finished = c.push(q, "{}");
    // While the caller waits, another job of the queue finishes and their own channel hears.
    auto during = std::async(std::launch::async, [&] {
        std::this_thread::sleep_for(100ms);
        Client o(conninfo());
        auto js = o.pull(q, [] {
            PullOptions po;
            po.n = 2;
            return po;
        }());
        for (const Job& j : js)
            if (j.id == finished) o.complete(j.id, j.lease_token);
        o.exec("SELECT pg_catalog.pg_notify($1, 'hello')", app);
    });
    EXPECT_FALSE(c.wait_for(waited, 700ms));
    during.get();

    auto listening = [&](const std::string& channel) {
        return c.exec("SELECT $1 = ANY (ARRAY(SELECT pg_catalog.pg_listening_channels()))", channel)
            .boolean(0, 0);
    };
    EXPECT_TRUE(listening("hopper:done")) << "the caller's LISTEN was removed";
    EXPECT_TRUE(listening(app));
    // What came meanwhile is the caller's to read, in the order it came.
    std::vector<Notification> got;
    eventually(
        [&] {
            c.connection().wait(100ms);
            for (auto& n : c.connection().notifications()) got.push_back(std::move(n));
            return got.size() >= 2;
        },
        5s);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].channel, "hopper:done");
    EXPECT_NE(got[0].payload.find(std::to_string(finished)), std::string::npos) << got[0].payload;
    EXPECT_EQ(got[1].channel, app);
    EXPECT_EQ(got[1].payload, "hello");

    // A wait that the job's end ends leaves its "hopper:done" to the caller that listens too.
    ASSERT_TRUE(other.cancel(waited));
    auto info = c.wait_for(waited, 5s);
    ASSERT_TRUE(info);
    EXPECT_EQ(info->state, JobState::Cancelled);
    EXPECT_TRUE(listening("hopper:done"));
    got.clear();
    eventually(
        [&] {
            c.connection().wait(100ms);
            for (auto& n : c.connection().notifications()) got.push_back(std::move(n));
            return !got.empty();
        },
        5s);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].channel, "hopper:done");
}

// A caller that does not listen on "hopper:done" gets none of those wait_for's LISTEN brought,
// and still its own.
TEST(WaitFor, KeepsOnlyItsOwnDoneNotifications) {
    Client c(conninfo()), other(conninfo());
    std::string q = unique_queue("wait");
    const std::string app = q + ":app";
    c.queue_create(q);
    c.exec("SELECT hopper.queue_set_notify_done($1, true)", q);
    c.connection().listen(app);
    int64_t id = c.push(q, "{}");
    auto during = std::async(std::launch::async, [&] {
        std::this_thread::sleep_for(100ms);
        Client o(conninfo());
        o.exec("SELECT pg_catalog.pg_notify($1, 'hello')", app);
        auto j = o.pull(q).at(0);
        o.complete(j.id, j.lease_token);
    });
    auto info = c.wait_for(id, 30s);
    during.get();
    ASSERT_TRUE(info);
    EXPECT_EQ(info->state, JobState::Completed);
    EXPECT_EQ(
        c.exec("SELECT array_agg(ch)::text FROM pg_catalog.pg_listening_channels() ch").text(0, 0),
        "{" + app + "}");
    c.connection().wait(200ms);
    auto got = c.connection().notifications();
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].channel, app);
    EXPECT_EQ(got[0].payload, "hello");
}

// A connection lost during a wait does not end it: the next poll connects again (and LISTENs
// again), the job's finish ends the wait, and the LISTEN the wait made is gone after it (for good,
// every later wait would hand the caller each job's end in the database).
TEST(WaitFor, ALostConnectionIsMadeAgainAndLeavesNoListenBehind) {
    Client c(conninfo()), admin(conninfo());
    std::string q = unique_queue("wait");
    c.queue_create(q);
    c.exec("SELECT hopper.queue_set_notify_done($1, true)", q);
    int64_t id = c.push(q, "{}");
    int pid = c.connection().backend_pid();
    auto killer = std::async(std::launch::async, [&] {
        std::this_thread::sleep_for(300ms);
        admin.exec("SELECT pg_catalog.pg_terminate_backend($1)", pid);
        std::this_thread::sleep_for(300ms);
        Job j = admin.pull(q).at(0);
        admin.complete(j.id, j.lease_token);
    });
    std::optional<JobInfo> done = c.wait_for(id, 30s);
    killer.get();
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->state, JobState::Completed);
    ASSERT_NE(c.connection().backend_pid(), pid);
    EXPECT_EQ(c.exec("SELECT count(*) FROM pg_catalog.pg_listening_channels()").int64(0, 0), 0);
}

// A connection lost while the Client sat idle (idle_session_timeout, a restart, a failover) is
// found by the wait's first statement, its LISTEN: that was outside the polls' reconnecting, and
// the wait threw ConnectionError at once. It connects again as a lost poll does.
TEST(WaitFor, AConnectionLostBeforeTheWaitIsMadeAgain) {
    Client c(conninfo()), admin(conninfo());
    std::string q = unique_queue("wait");
    int64_t id = c.push(q, "{}");
    int pid = c.connection().backend_pid();
    admin.exec("SELECT pg_catalog.pg_terminate_backend($1, 5000)", pid);
    auto finisher = std::async(std::launch::async, [&] {
        std::this_thread::sleep_for(500ms);
        Job j = admin.pull(q).at(0);
        return admin.complete(j.id, j.lease_token);
    });
    std::optional<JobInfo> done = c.wait_for(id, 5s);
    EXPECT_TRUE(finisher.get());
    ASSERT_TRUE(done.has_value());
    EXPECT_EQ(done->state, JobState::Completed);
    ASSERT_NE(c.connection().backend_pid(), pid);
    EXPECT_EQ(c.exec("SELECT count(*) FROM pg_catalog.pg_listening_channels()").int64(0, 0), 0);
}

// Inside a transaction the loss is the caller's: the transaction went with the connection.
TEST(WaitFor, AConnectionLostBeforeTheWaitInATransactionIsTheCallers) {
    Client c(conninfo()), admin(conninfo());
    std::string q = unique_queue("wait");
    int64_t id = c.push(q, "{}");
    Transaction tx(c);
    c.exec("SELECT 1");
    admin.exec("SELECT pg_catalog.pg_terminate_backend($1, 5000)", c.connection().backend_pid());
    EXPECT_THROW(c.wait_for(id, 5s), ConnectionError);
}

}  // namespace
}  // namespace hopper
