// TakeWorker against a real server: handlers run in the transaction that takes their jobs, so
// their SQL and the completion commit together, and a failure undoes the SQL and counts the
// attempt.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "hopper/take_worker.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using hopper::test::conninfo;
using hopper::test::eventually;
using hopper::test::unique_queue;

namespace hopper {
namespace {

TakeWorkerOptions options(const std::string& queue, int concurrency = 2, int batch = 1) {
    TakeWorkerOptions o;
    o.conninfo = conninfo();
    o.queue = queue;
    o.concurrency = concurrency;
    o.batch = batch;
    o.name = "take-worker-test";
    o.handle_signals = false;
    o.poll_interval = 500ms;
    o.log = [](const std::string&) {};
    return o;
}

using Running = test::Running<TakeWorker>;

class TakeWorkerTest : public ::testing::Test {
  protected:
    void SetUp() override {
        c.exec("CREATE TABLE IF NOT EXISTS take_marks (job_id bigint PRIMARY KEY, queue text)");
    }
    int64_t marks(const std::string& queue) {
        return std::stoll(std::string(
            c.exec("SELECT count(*) FROM take_marks WHERE queue = $1", queue).text(0, 0)));
    }
    int64_t push_kind(const std::string& queue, const std::string& kind) {
        PushOptions po;
        po.kind = kind;
        return c.push(queue, "{}", po);
    }
    // A handler that writes its job's row and then does what `then` says.
    TakeHandler marking(std::function<void(const Job&)> then = {}) {
        return [then](const Job& job, Client& db) {
            db.exec("INSERT INTO take_marks (job_id, queue) VALUES ($1, $2)", job.id, job.queue);
            if (then) then(job);
        };
    }
    Client c{conninfo()};
};

TEST_F(TakeWorkerTest, CompletesJobsTogetherWithTheHandlersSql) {
    std::string q = unique_queue("take");
    std::vector<std::string> payloads(12, "{}");
    std::vector<int64_t> ids = c.push_batch(q, payloads);
    TakeWorker w(options(q, 3, 2));
    w.on_any(marking());
    Running r(w);
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).completed == 12; }, 60s));
    r.stop();
    EXPECT_EQ(marks(q), 12);
    EXPECT_EQ(w.stats().completed, 12u);
    EXPECT_EQ(w.stats().failed, 0u);
    JobInfo info = c.job_status(ids[5]);
    EXPECT_EQ(info.state, JobState::Completed);
    EXPECT_EQ(info.attempt, 1);
    EXPECT_EQ(info.worker, std::optional<std::string>("take-worker-test"));
}

TEST_F(TakeWorkerTest, AFailingHandlerIsUndoneAndCountsTheAttempt) {
    std::string q = unique_queue("take");
    QueueOptions qo;
    qo.max_attempts = 2;
    c.queue_create(q, qo);
    int64_t retried = push_kind(q, "retry");
    int64_t buried = push_kind(q, "hopeless");
    std::atomic<int> runs{0};
    TakeWorker w(options(q));
    w.on("retry", marking([&](const Job&) {
             ++runs;
             throw RetryIn(0ms, "upstream busy");
         }));
    w.on("hopeless", marking([](const Job&) { throw PermanentFailure("malformed invoice"); }));
    Running r(w);
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).dead == 2; }, 60s));
    r.stop();
    EXPECT_EQ(runs.load(), 2);  // attempts 1 and 2 of max_attempts 2
    EXPECT_EQ(marks(q), 0);     // every handler's insert was rolled back
    JobInfo a = c.job_status(retried);
    EXPECT_EQ(a.attempt, 2);
    EXPECT_EQ(a.last_error, std::optional<std::string>("upstream busy"));
    JobInfo b = c.job_status(buried);
    EXPECT_EQ(b.attempt, 1);
    EXPECT_EQ(b.last_error, std::optional<std::string>("malformed invoice"));
    EXPECT_EQ(w.stats().failed, 3u);
    EXPECT_EQ(w.stats().completed, 0u);
}

// A handler that ended the take's transaction: after a ROLLBACK the commit "succeeded" with
// nothing to commit, the job counted completed and taken again at once, for ever, its attempt
// never counted; after a COMMIT and a throw, or a throw after the savepoint was released, the
// failure could not be recorded and the log spoke only of the savepoint.
TEST_F(TakeWorkerTest, AHandlerThatEndsItsTransactionFailsItsJob) {
    std::string q = unique_queue("take");
    QueueOptions qo;
    qo.max_attempts = 1;
    c.queue_create(q, qo);
    int64_t rolled_back = push_kind(q, "rollback");
    int64_t released = push_kind(q, "release");
    int64_t committed = push_kind(q, "commit");
    TakeWorkerOptions o = options(q, 1);
    std::mutex m;
    std::vector<std::string> lines;
    o.log = [&](const std::string& line) {
        std::lock_guard<std::mutex> lock(m);
        lines.push_back(line);
    };
    std::atomic<int> runs{0};
    TakeWorker w(o);
    w.on("rollback", [&](const Job& job, Client& db) {
        ++runs;
        db.exec("INSERT INTO take_marks (job_id, queue) VALUES ($1, $2)", job.id, job.queue);
        db.exec("ROLLBACK");
    });
    w.on("release", [](const Job&, Client& db) {
        db.exec("RELEASE SAVEPOINT hopper_take");
        throw std::runtime_error("failed after releasing the savepoint");
    });
    w.on("commit", [](const Job&, Client& db) {
        db.exec("COMMIT");
        throw std::runtime_error("failed after committing");
    });
    Running r(w);
    for (int64_t id : {rolled_back, released})
        ASSERT_TRUE(eventually([&] { return c.job_status(id).state == JobState::Dead; }, 20s))
            << "job " << id << " is " << to_string(c.job_status(id).state);
    ASSERT_TRUE(eventually(
        [&] {
            std::lock_guard<std::mutex> lock(m);
            for (const std::string& l : lines)
                if (l.find("its failure could not be recorded") != std::string::npos) return true;
            return false;
        },
        20s));
    r.stop();
    EXPECT_EQ(runs.load(), 1);
    EXPECT_EQ(marks(q), 0);  // the rolled-back handler's insert stayed undone
    JobInfo a = c.job_status(rolled_back);
    EXPECT_EQ(a.attempt, 1);
    EXPECT_EQ(a.last_error, std::optional<std::string>("the handler ended the transaction it runs "
                                                       "in (a COMMIT or ROLLBACK of its own)"));
    JobInfo b = c.job_status(released);
    EXPECT_EQ(b.attempt, 1);
    EXPECT_NE(b.last_error.value_or("").find("failed after releasing the savepoint"),
              std::string::npos)
        << b.last_error.value_or("(none)");
    EXPECT_EQ(c.job_status(committed).state, JobState::Completed);  // it did commit
    EXPECT_EQ(w.stats().completed, 0u);
    EXPECT_EQ(w.stats().failed, 2u);
}

// The failure is logged on a taker's thread, where a throw from the log function would end the
// process.
TEST_F(TakeWorkerTest, ALogFunctionThatThrowsDoesNotEndTheWorker) {
    std::string q = unique_queue("take");
    int64_t bad = push_kind(q, "bad");
    TakeWorkerOptions o = options(q);
    std::atomic<int> told{0};
    o.log = [&](const std::string&) {
        ++told;
        throw std::runtime_error("log sink is full");
    };
    TakeWorker w(o);
    w.on("bad", [](const Job&, Client&) { throw PermanentFailure("bad input"); });
    w.on("good", [](const Job&, Client&) {});
    Running r(w);
    ASSERT_TRUE(eventually([&] { return c.job_status(bad).state == JobState::Dead; }, 60s));
    int64_t good = push_kind(q, "good");
    ASSERT_TRUE(eventually([&] { return c.job_status(good).state == JobState::Completed; }, 60s));
    r.stop();
    EXPECT_GE(told.load(), 1);
    EXPECT_EQ(w.stats().failed, 1u);
    EXPECT_EQ(w.stats().completed, 1u);
}

TEST_F(TakeWorkerTest, AFailingJobLeavesTheOthersOfItsTakeDone) {
    std::string q = unique_queue("take");
    QueueOptions qo;
    qo.backoff_base = std::chrono::hours(1);  // the failed job stays scheduled through the test
    c.queue_create(q, qo);
    int64_t first = push_kind(q, "good");
    int64_t failing = push_kind(q, "bad");
    int64_t last = push_kind(q, "good");
    TakeWorker w(options(q, 1, 3));
    w.on("good", marking());
    w.on("bad", marking([](const Job&) { throw std::runtime_error("bad input"); }));
    Running r(w);
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).completed == 2; }, 60s));
    ASSERT_TRUE(eventually([&] { return c.job_status(failing).attempt == 1; }, 30s));
    r.stop();
    EXPECT_EQ(w.stats().pulls, 1u);  // all three in one take
    EXPECT_EQ(marks(q), 2);          // the failed job's insert alone was undone
    EXPECT_EQ(c.job_status(first).state, JobState::Completed);
    EXPECT_EQ(c.job_status(last).state, JobState::Completed);
    JobInfo f = c.job_status(failing);
    EXPECT_EQ(f.state, JobState::Scheduled);  // the queue's backoff
    EXPECT_EQ(f.last_error, std::optional<std::string>("bad input"));
    EXPECT_EQ(w.stats().completed, 2u);
    EXPECT_EQ(w.stats().failed, 1u);
}

// A COMMIT that fails rolls back the failures recorded in the take too. Every job used to be
// failed again with the commit's error: a PermanentFailure was retried, a RetryIn's delay
// ignored, the handler's own error lost. The jobs whose handlers failed keep their own failure;
// only the others fail with the commit's error.
TEST_F(TakeWorkerTest, AFailedCommitLeavesTheHandlersOwnFailuresAsTheyWere) {
    c.exec(
        "CREATE TABLE IF NOT EXISTS take_deferred (queue text, k int, CONSTRAINT take_deferred_key "
        "UNIQUE (queue, k) DEFERRABLE INITIALLY DEFERRED)");
    std::string q = unique_queue("take");
    QueueOptions qo;
    qo.max_attempts = 3;
    qo.backoff_base = std::chrono::hours(1);  // the failed jobs stay scheduled through the test
    c.queue_create(q, qo);
    int64_t hopeless = push_kind(q, "hopeless");
    int64_t duplicate = push_kind(q, "duplicate");
    int64_t later = push_kind(q, "later");
    TakeWorker w(options(q, 1, 3));
    w.on("hopeless",
         marking([](const Job&) { throw PermanentFailure("job A can never succeed"); }));
    w.on("duplicate", [](const Job& job, Client& db) {
        // Fine until the COMMIT checks the deferred constraint.
        db.exec("INSERT INTO take_deferred VALUES ($1, 1), ($1, 1)", job.queue);
    });
    w.on("later", marking([](const Job&) { throw RetryIn(std::chrono::hours(5), "not yet"); }));
    Running r(w);
    ASSERT_TRUE(eventually(
        [&] {
            for (int64_t id : {hopeless, duplicate, later})
                if (c.job_status(id).attempt < 1) return false;
            return true;
        },
        30s));
    r.stop();
    EXPECT_EQ(w.stats().pulls, 1u);  // all three in one take
    EXPECT_EQ(marks(q), 0);
    const auto now = std::chrono::system_clock::now();
    JobInfo a = c.job_status(hopeless);
    EXPECT_EQ(a.state, JobState::Dead);
    EXPECT_EQ(a.attempt, 1);
    EXPECT_EQ(a.last_error, std::optional<std::string>("job A can never succeed"));
    JobInfo b = c.job_status(duplicate);
    EXPECT_EQ(b.state, JobState::Scheduled);
    EXPECT_EQ(b.attempt, 1);
    EXPECT_EQ(b.last_error.value_or("").rfind("commit failed: ", 0), 0u)
        << b.last_error.value_or("(none)");
    EXPECT_NE(b.last_error.value_or("").find("duplicate key"), std::string::npos)
        << b.last_error.value_or("(none)");
    EXPECT_LE(b.run_at, now + std::chrono::hours(1));  // the queue's backoff, capped at 1 h
    JobInfo l = c.job_status(later);
    EXPECT_EQ(l.state, JobState::Scheduled);
    EXPECT_EQ(l.attempt, 1);
    EXPECT_EQ(l.last_error, std::optional<std::string>("not yet"));
    EXPECT_GE(l.run_at, now + std::chrono::hours(4));  // the handler's RetryIn
    EXPECT_EQ(w.stats().completed, 0u);
    EXPECT_EQ(w.stats().failed, 3u);
}

// A handler's own connection elsewhere (a service that is down) failing is its job's failure,
// not the loss of the take's connection: the attempt counts and the rest of the batch commits.
TEST_F(TakeWorkerTest, AConnectionErrorFromTheHandlersOwnConnectionFailsOnlyItsJob) {
    std::string q = unique_queue("take");
    QueueOptions qo;
    qo.max_attempts = 3;
    qo.backoff_base = std::chrono::hours(1);  // the failed job stays scheduled through the test
    c.queue_create(q, qo);
    int64_t failing = push_kind(q, "elsewhere");
    std::vector<int64_t> good;
    for (int i = 0; i < 5; ++i) good.push_back(push_kind(q, "good"));
    TakeWorker w(options(q, 1, 4));
    w.on("good", marking());
    w.on("elsewhere", marking([](const Job&) { Client other("host=/nonexistent port=1"); }));
    Running r(w);
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).completed == 5; }, 30s));
    ASSERT_TRUE(eventually([&] { return c.job_status(failing).attempt == 1; }, 30s));
    r.stop();
    JobInfo f = c.job_status(failing);
    EXPECT_EQ(f.state, JobState::Scheduled);
    ASSERT_TRUE(f.last_error.has_value());
    EXPECT_NE(f.last_error->find("could not connect"), std::string::npos) << *f.last_error;
    EXPECT_EQ(marks(q), 5);  // the failed job's insert alone was undone
    EXPECT_EQ(w.stats().completed, 5u);
    EXPECT_EQ(w.stats().failed, 1u);
}

// A handler's own EXECUTE of a statement that does not exist (26000) made the client forget its
// prepared statements: recording the failure then prepared fail_taken's again, the server
// refused (42P05), the take rolled back, and the job was taken again for ever at attempt 1.
TEST_F(TakeWorkerTest, AHandlersUnknownStatementStillCountsTheAttempt) {
    std::string q = unique_queue("take");
    QueueOptions qo;
    qo.max_attempts = 2;
    qo.backoff_base = 1ms;
    qo.backoff_cap = 1ms;
    c.queue_create(q, qo);
    int64_t id = push_kind(q, "plan");
    std::atomic<int> runs{0};
    TakeWorker w(options(q, 1));
    w.on("plan", [&](const Job&, Client& db) {
        ++runs;
        db.exec("EXECUTE no_such_statement");
    });
    Running r(w);
    ASSERT_TRUE(eventually([&] { return c.job_status(id).state == JobState::Dead; }, 30s))
        << "handler ran " << runs.load() << " times, attempt " << c.job_status(id).attempt;
    r.stop();
    EXPECT_EQ(runs.load(), 2);
    JobInfo j = c.job_status(id);
    EXPECT_EQ(j.attempt, 2);
    ASSERT_TRUE(j.last_error.has_value());
    EXPECT_NE(j.last_error->find("no_such_statement"), std::string::npos) << *j.last_error;
}

TEST_F(TakeWorkerTest, TakesOnlyTheKindsItHandles) {
    std::string q = unique_queue("take");
    int64_t a = push_kind(q, "mine");
    int64_t b = push_kind(q, "other");
    TakeWorker w(options(q));
    w.on("mine", marking());
    Running r(w);
    ASSERT_TRUE(eventually([&] { return c.job_status(a).state == JobState::Completed; }, 60s));
    r.stop();
    JobInfo left = c.job_status(b);
    EXPECT_EQ(left.state, JobState::Available);
    EXPECT_EQ(left.attempt, 0);
}

TEST_F(TakeWorkerTest, WakesOnNotifyWithoutPolling) {
    std::string q = unique_queue("take");
    c.queue_create(q);
    TakeWorkerOptions o = options(q);
    o.waiting_takes = false;
    o.poll_interval = 120s;  // only a NOTIFY can wake it within the test
    TakeWorker w(o);
    w.on_any(marking());
    Running r(w);
    std::this_thread::sleep_for(500ms);  // the takers found nothing and sleep
    int64_t id = c.push(q, "{}");
    EXPECT_TRUE(eventually([&] { return c.job_status(id).state == JobState::Completed; }, 30s));
}

TakeWorkerOptions slow_polling(const std::string& queue, int concurrency) {
    return test::slow_polling(options(queue, concurrency), queue);
}

int64_t waiting_takes(Client& c, const std::string& queue) {
    return test::waiting_in(c, queue, "queue_take");
}

TEST_F(TakeWorkerTest, IdleTakersWaitInTheServerAndStartAPushAtOnce) {
    std::string q = unique_queue("take");
    c.queue_create(q);
    TakeWorker w(slow_polling(q, 2));
    w.on_any(marking());
    Running r(w);
    ASSERT_TRUE(eventually([&] { return waiting_takes(c, q) == 2; }, 10s));
    c.exec("SET hopper.notify = off");  // no NOTIFY, and no poll for 20 s
    for (int i = 1; i <= 3; ++i) {
        auto pushed = std::chrono::steady_clock::now();
        int64_t id = c.push(q, "{}");
        ASSERT_TRUE(eventually([&] { return c.job_status(id).state == JobState::Completed; }, 10s));
        EXPECT_LT(std::chrono::steady_clock::now() - pushed, 1s) << "job " << i;
        ASSERT_TRUE(eventually([&] { return waiting_takes(c, q) == 2; }, 10s));
    }
    EXPECT_EQ(marks(q), 3);
}

TEST_F(TakeWorkerTest, AZeroPollIntervalStillWaitsInTheServer) {
    std::string q = unique_queue("take");
    c.queue_create(q);
    TakeWorkerOptions o = slow_polling(q, 2);
    o.poll_interval = 0ms;  // a wait of 0 would return at once, and the takers would spin
    TakeWorker w(o);
    w.on_any(marking());
    Running r(w);
    EXPECT_TRUE(eventually([&] { return waiting_takes(c, q) == 2; }, 10s));
    int64_t id = c.push(q, "{}");
    EXPECT_TRUE(eventually([&] { return c.job_status(id).state == JobState::Completed; }, 10s));
}

// Which transaction each job's handler ran in, with `gather` as given: job A is pushed, job B
// 50 ms later, to a worker waiting in its take.
std::map<std::string, int64_t> transactions_of_two_pushes(Client& c, Duration gather) {
    std::string q = unique_queue("take");
    c.queue_create(q);
    TakeWorkerOptions o = slow_polling(q, 1);
    o.batch = 16;
    o.gather = gather;
    std::mutex mu;
    std::map<std::string, int64_t> txid;
    TakeWorker w(o);
    w.on_any([&](const Job& job, Client& db) {
        int64_t t = db.exec("SELECT pg_catalog.txid_current()").int64(0, 0);
        std::lock_guard<std::mutex> lock(mu);
        txid[job.payload] = t;
    });
    Running r(w);
    EXPECT_TRUE(eventually([&] { return waiting_takes(c, q) == 1; }, 10s));
    c.push(q, R"({"job": "A"})");
    std::this_thread::sleep_for(50ms);
    c.push(q, R"({"job": "B"})");
    EXPECT_TRUE(eventually(
        [&] {
            std::lock_guard<std::mutex> lock(mu);
            return txid.size() == 2;
        },
        10s));
    r.stop();
    return txid;
}

TEST_F(TakeWorkerTest, GatherLetsOneTransactionCarryJobsPushedJustAfter) {
    std::map<std::string, int64_t> apart = transactions_of_two_pushes(c, 0ms);
    ASSERT_EQ(apart.size(), 2u);
    EXPECT_NE(apart[R"({"job": "A"})"], apart[R"({"job": "B"})"])
        << "without gather the first job runs as soon as it is taken";
    std::map<std::string, int64_t> together = transactions_of_two_pushes(c, 500ms);
    ASSERT_EQ(together.size(), 2u);
    EXPECT_EQ(together[R"({"job": "A"})"], together[R"({"job": "B"})"]);
}

TEST_F(TakeWorkerTest, StopEndsTheWaitingTakesAtOnce) {
    std::string q = unique_queue("take");
    c.queue_create(q);
    TakeWorker w(slow_polling(q, 3));
    w.on_any(marking());
    std::thread t([&] { w.run(); });
    bool waited = eventually([&] { return waiting_takes(c, q) == 3; }, 10s);
    auto stopping = std::chrono::steady_clock::now();
    w.stop();
    t.join();
    ASSERT_TRUE(waited);
    EXPECT_LT(std::chrono::steady_clock::now() - stopping, 3s);
    EXPECT_EQ(waiting_takes(c, q), 0);
    int64_t id = c.push(q, "{}");
    EXPECT_EQ(c.job_status(id).state, JobState::Available);
    EXPECT_EQ(w.stats().completed, 0u);
}

TEST_F(TakeWorkerTest, AStatementTimeoutFallsBackToListening) {
    std::string q = unique_queue("take");
    c.queue_create(q);
    TakeWorkerOptions o = slow_polling(q, 1);
    o.conninfo += " options='-c statement_timeout=300'";
    std::atomic<int> fallbacks{0};
    o.log = [&](const std::string& line) {
        if (line.find("listening instead") != std::string::npos) ++fallbacks;
    };
    TakeWorker w(o);
    w.on_any(marking());
    Running r(w);
    ASSERT_TRUE(eventually([&] { return fallbacks.load() == 1; }, 10s));
    // The push's NOTIFY wakes it instead of the 20 s poll, and it does not wait again.
    int64_t id = c.push(q, "{}");
    EXPECT_TRUE(eventually([&] { return c.job_status(id).state == JobState::Completed; }, 5s));
    std::this_thread::sleep_for(500ms);
    EXPECT_EQ(fallbacks.load(), 1);
}

// An operator's pg_cancel_backend of a waiting take fails with the SQLSTATE of a
// statement_timeout, but says nothing about whether the role can wait: the taker waits in the
// server again after its back-off, rather than have the worker listen and poll for good.
TEST_F(TakeWorkerTest, ACancelledWaitingTakeWaitsAgain) {
    std::string q = unique_queue("take");
    c.queue_create(q);
    TakeWorkerOptions o = slow_polling(q, 1);
    std::atomic<int> listening{0};
    o.log = [&](const std::string& line) {
        if (line.find("listening") != std::string::npos) ++listening;
    };
    TakeWorker w(o);
    w.on_any(marking());
    Running r(w);
    ASSERT_TRUE(eventually([&] { return waiting_takes(c, q) == 1; }, 30s));
    // A new waiting take on the same connection.
    ASSERT_TRUE(test::waits_again_after_cancel(c, q, "queue_take"));
    EXPECT_EQ(listening.load(), 0);
    c.exec("SET hopper.notify = off");  // only the waiting take can start it in time
    int64_t id = c.push(q, "{}");
    EXPECT_TRUE(eventually([&] { return c.job_status(id).state == JobState::Completed; }, 10s));
}

TEST_F(TakeWorkerTest, ShutdownLetsARunningHandlerFinish) {
    std::string q = unique_queue("take");
    int64_t id = c.push(q, "{}");
    std::atomic<bool> started{false};
    TakeWorker w(options(q));
    w.on_any(marking([&](const Job&) {
        started = true;
        std::this_thread::sleep_for(300ms);
    }));
    Running r(w);
    ASSERT_TRUE(eventually([&] { return started.load(); }, 30s));
    r.stop();  // within shutdown_timeout (30 s): the transaction commits
    EXPECT_EQ(c.job_status(id).state, JobState::Completed);
    EXPECT_EQ(marks(q), 1);
    EXPECT_EQ(w.stats().completed, 1u);
    EXPECT_EQ(w.stats().released, 0u);
}

TEST_F(TakeWorkerTest, ShutdownDeadlineEndsTheTransactionAndFreesItsJob) {
    std::string q = unique_queue("take");
    int64_t id = c.push(q, "{}");
    std::atomic<bool> started{false}, let_go{false};
    TakeWorkerOptions o = options(q, 1);
    o.shutdown_timeout = 200ms;
    TakeWorker w(o);
    w.on_any(marking([&](const Job&) {
        started = true;
        // Stuck outside the database until the test lets it go.
        while (!let_go) std::this_thread::sleep_for(10ms);
    }));
    Running r(w);
    ASSERT_TRUE(eventually([&] { return started.load(); }, 30s));
    std::thread stopper([&] { r.stop(); });
    // While the handler is still stuck, its transaction is gone: the job row is unlocked and
    // nothing the handler wrote is left.
    bool freed = eventually(
        [&] {
            return c.exec("SELECT id FROM hopper.jobs WHERE id = $1 FOR UPDATE SKIP LOCKED", id)
                       .rows() == 1;
        },
        30s);
    let_go = true;
    stopper.join();
    ASSERT_TRUE(freed);
    EXPECT_EQ(marks(q), 0);
    JobInfo info = c.job_status(id);
    EXPECT_EQ(info.state, JobState::Available);
    EXPECT_EQ(info.attempt, 0);  // a shutdown is not a failed attempt
    EXPECT_EQ(w.stats().released, 1u);
    EXPECT_EQ(w.stats().completed, 0u);
    EXPECT_EQ(w.stats().failed, 0u);
}

// Ctrl-C pressed twice: the second signal ends the open transaction at once, as the shutdown
// deadline (30 s here) would, and its job is available again without an attempt spent.
TEST_F(TakeWorkerTest, ASecondSignalEndsTheOpenTransactionsAtOnce) {
    std::string q = unique_queue("take");
    int64_t id = c.push(q, "{}");
    std::atomic<bool> started{false}, let_go{false}, returned{false};
    TakeWorkerOptions o = options(q, 1);
    o.handle_signals = true;
    o.shutdown_timeout = 30s;
    TakeWorker w(o);
    w.on_any(marking([&](const Job&) {
        started = true;
        // Stuck outside the database until the test lets it go.
        while (!let_go) std::this_thread::sleep_for(10ms);
    }));
    std::thread runner([&] {
        w.run();
        returned = true;
    });
    struct Join {
        std::thread& t;
        std::atomic<bool>& let_go;
        ~Join() {
            let_go = true;
            if (t.joinable()) t.join();
        }
    } join{runner, let_go};
    ASSERT_TRUE(eventually([&] { return started.load(); }, 30s));
    ASSERT_EQ(::raise(SIGTERM), 0);
    std::this_thread::sleep_for(500ms);
    auto locked = [&] {
        return c.exec("SELECT id FROM hopper.jobs WHERE id = $1 FOR UPDATE SKIP LOCKED", id)
                   .rows() == 0;
    };
    EXPECT_TRUE(locked()) << "one signal lets the open transaction run on";
    ASSERT_EQ(::raise(SIGTERM), 0);
    bool freed = eventually([&] { return !locked(); }, 5s);
    let_go = true;
    runner.join();
    ASSERT_TRUE(freed) << "a second signal still waited for the shutdown timeout";
    EXPECT_EQ(marks(q), 0);
    JobInfo info = c.job_status(id);
    EXPECT_EQ(info.state, JobState::Available);
    EXPECT_EQ(info.attempt, 0);  // a shutdown is not a failed attempt
    EXPECT_EQ(w.stats().released, 1u);
    EXPECT_EQ(w.stats().completed, 0u);
}

// A TCP proxy in front of the server (python3), which a test pauses with SIGSTOP: a server host
// that stops answering. Its listening socket still completes connections in the kernel, so a
// cancel request sent through it waits for an answer that does not come until SIGCONT.
class PausableProxy {
  public:
    PausableProxy() {
        int out[2];
        if (::pipe(out) != 0) return;
        pid_ = ::fork();
        if (pid_ == 0) {
            ::dup2(out[1], 1);
            ::close(out[0]);
            ::close(out[1]);
            ::execlp("python3", "python3", "-c", kScript, static_cast<char*>(nullptr));
            ::_exit(127);
        }
        ::close(out[1]);
        // The whole line: Python may write the number and its newline apart, and a pipe closed
        // between the two would end the proxy with a broken pipe.
        std::string line;
        char ch = 0;
        while (line.size() < 16 && ::read(out[0], &ch, 1) == 1 && ch != '\n') line += ch;
        ::close(out[0]);
        if (!line.empty()) port_ = std::atoi(line.c_str());
    }
    ~PausableProxy() {
        if (pid_ <= 0) return;
        ::kill(pid_, SIGKILL);
        ::kill(pid_, SIGCONT);
        ::waitpid(pid_, nullptr, 0);
    }
    int port() const { return port_; }
    void pause() { ::kill(pid_, SIGSTOP); }
    void resume() { ::kill(pid_, SIGCONT); }

  private:
    static constexpr const char* kScript = R"(
import os, socket, sys, threading
host, port = os.environ.get('PGHOST', '/tmp'), os.environ.get('PGPORT', '5432')
def upstream():
    if host.startswith('/'):
        s = socket.socket(socket.AF_UNIX)
        s.connect(os.path.join(host, '.s.PGSQL.' + port))
    else:
        s = socket.create_connection((host, int(port)))
    return s
def pump(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
ls = socket.socket()
ls.bind(('127.0.0.1', 0))
ls.listen(64)
sys.stdout.write('%d\n' % ls.getsockname()[1])
sys.stdout.flush()
while True:
    c, _ = ls.accept()
    u = upstream()
    threading.Thread(target=pump, args=(c, u), daemon=True).start()
    threading.Thread(target=pump, args=(u, c), daemon=True).start()
)";
    pid_t pid_ = -1;
    int port_ = 0;
};

// A Transaction left with a pull waiting in the server, through a host that stopped answering:
// its rollback (here the destructor's) returns at once, where a cancel would wait for an answer
// that does not come, and what it pushed is not committed by anything after it.
TEST_F(TakeWorkerTest, ARollbackBehindAHostThatStoppedAnsweringDoesNotWait) {
    PausableProxy proxy;
    ASSERT_GT(proxy.port(), 0) << "python3 proxy did not start";
    std::string q = unique_queue("take");
    c.queue_create(q);
    Client db{fmt::format("{} host=127.0.0.1 port={}", conninfo(), proxy.port())};
    int64_t undone = 0;
    std::atomic<bool> paused{false};
    // The host answers again after 5 s, so that a rollback that waits for it fails, not hangs.
    std::thread waker([&] {
        while (!paused) std::this_thread::sleep_for(10ms);
        std::this_thread::sleep_for(5s);
        proxy.resume();
    });
    auto t0 = std::chrono::steady_clock::now();
    try {
        Transaction tx(db);
        undone = db.push(q, "{}");
        PullOptions po;
        po.wait = 3s;
        db.begin_pull(unique_queue("take"), po);  // an empty queue: the pull waits
        proxy.pause();
        paused = true;
        throw std::runtime_error("the caller failed half-way");
    } catch (const std::runtime_error&) {
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "the rollback waited on the server";
    paused = true;
    waker.join();
    EXPECT_FALSE(db.connection().in_transaction());
    // The server ends the old session when its pull's wait is over, and the push with it.
    try {
        c.job_status(undone);
        ADD_FAILURE() << "the push of the rolled-back transaction is visible";
    } catch (const Error& e) {
        EXPECT_EQ(e.sqlstate(), "P0002");
    }
}

// The shutdown cancels the waiting takes with PQcancel, which waits for the server's answer; one
// that does not come (a host that stopped answering) holds up that cancel, but not stop() called
// again from another thread, nor anything else that needs the worker's lock meanwhile.
TEST_F(TakeWorkerTest, ACancelThatGetsNoAnswerHoldsUpNoOtherThread) {
    PausableProxy proxy;
    ASSERT_GT(proxy.port(), 0) << "python3 proxy did not start";
    std::string q = unique_queue("take");
    TakeWorkerOptions o = options(q, 2);
    o.conninfo = fmt::format("{} host=127.0.0.1 port={} application_name=take_proxy_{}", conninfo(),
                             proxy.port(), q);
    o.poll_interval = 20s;  // the takes wait in the server all along
    TakeWorker w(o);
    w.on_any(marking());
    std::thread runner([&] { w.run(); });
    struct Finish {
        PausableProxy& proxy;
        TakeWorker& w;
        std::thread& runner;
        ~Finish() {
            proxy.resume();
            w.stop();
            if (runner.joinable()) runner.join();
        }
    } finish{proxy, w, runner};
    ASSERT_TRUE(eventually(
        [&] {
            return c.exec(
                        "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE "
                        "application_name = $1 AND state = 'active' AND query LIKE "
                        "'%queue_take%'",
                        "take_proxy_" + q)
                       .int64(0, 0) == 2;
        },
        30s));
    proxy.pause();
    std::atomic<bool> first{false}, second{false};
    std::thread stopper([&] {
        w.stop();  // the shutdown begins, and its cancel gets no answer
        first = true;
    });
    std::this_thread::sleep_for(500ms);
    std::thread again([&] {
        w.stop();
        second = true;
    });
    bool returned = eventually([&] { return second.load(); }, 3s);
    proxy.resume();
    stopper.join();
    again.join();
    EXPECT_TRUE(returned) << "stop() waited for a cancel sent by another thread";
    EXPECT_TRUE(first.load());
}

TEST(TakeWorker, RefusesBadOptions) {
    TakeWorkerOptions no_threads = options("q", 0);
    EXPECT_THROW(TakeWorker{no_threads}, std::invalid_argument);
    TakeWorkerOptions no_batch = options("q", 1, 0);
    EXPECT_THROW(TakeWorker{no_batch}, std::invalid_argument);
    TakeWorkerOptions negative_gather = options("q");
    negative_gather.gather = -1ms;
    EXPECT_THROW(TakeWorker{negative_gather}, std::invalid_argument);
    TakeWorkerOptions long_gather = options("q");
    long_gather.gather = 2s;
    EXPECT_THROW(TakeWorker{long_gather}, std::invalid_argument);
    TakeWorkerOptions negative_deadline = options("q");
    negative_deadline.shutdown_timeout = -1ms;
    EXPECT_THROW(TakeWorker{negative_deadline}, std::invalid_argument);
}

TEST(TakeWorker, RefusesToRunWithoutHandlers) {
    TakeWorker w(options(unique_queue("take")));
    EXPECT_THROW(w.run(), std::logic_error);
}

// Destroyed while run() ran in another thread, the worker freed what run() and its threads were
// still using. It now stops and waits for run(): the handler running meanwhile has returned.
TEST(TakeWorker, DestroyedWhileRunningWaitsForRun) {
    Client c(conninfo());
    std::string q = unique_queue("take");
    std::atomic<bool> started{false}, handler_returned{false};
    auto w = std::make_unique<TakeWorker>(options(q, 1));
    w->on_any([&](const Job&, Client&) {
        started = true;
        std::this_thread::sleep_for(500ms);
        handler_returned = true;
    });
    std::thread t([&w] { w->run(); });
    c.push(q, "{}");
    ASSERT_TRUE(eventually([&] { return started.load(); }, 10s));
    w.reset();
    EXPECT_TRUE(handler_returned) << "the worker was destroyed under its running handler";
    t.join();
}

}  // namespace
}  // namespace hopper
