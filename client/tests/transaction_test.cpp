// Pushing inside the caller's own transaction: the job exists exactly when the caller's rows do;
// taking inside it: the job is finished exactly when they commit.
#include <gtest/gtest.h>

#include <thread>

#include "hopper/client.hpp"
#include "hopper/worker.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using hopper::test::conninfo;
using hopper::test::unique_queue;

namespace hopper {
namespace {

class TransactionTest : public ::testing::Test {
  protected:
    void SetUp() override {
        c.exec(
            "CREATE TABLE IF NOT EXISTS videos (id serial PRIMARY KEY, path text, "
            "status text NOT NULL DEFAULT 'pending', job_id bigint)");
    }
    // The queue was created by the push inside the transaction, so it went with the rollback too.
    void expect_no_queue(const std::string& q) {
        try {
            c.stats(q);
            ADD_FAILURE() << "queue " << q << " outlived its rolled-back transaction";
        } catch (const Error& e) {
            EXPECT_EQ(e.sqlstate(), "P0002");
        }
    }
    int64_t videos_with(const std::string& path) {
        return c.exec("SELECT count(*) FROM videos WHERE path = $1", path).int64(0, 0);
    }
    Client c{conninfo()};
};

TEST_F(TransactionTest, CommitKeepsRowAndJob) {
    std::string q = unique_queue("tx");
    int64_t job;
    {
        Transaction tx(c);
        auto vid = c.exec("INSERT INTO videos (path) VALUES ($1) RETURNING id", "commit.mp4");
        job = c.push(q, R"({"video": 1})");
        c.exec("UPDATE videos SET job_id = $1 WHERE id = $2", job, vid.int64(0, 0));
        tx.commit();
    }
    EXPECT_EQ(videos_with("commit.mp4"), 1);
    EXPECT_EQ(c.job_status(job).state, JobState::Available);
}

TEST_F(TransactionTest, RollbackLeavesNoJob) {
    std::string q = unique_queue("tx");
    int64_t job;
    {
        Transaction tx(c);
        c.exec("INSERT INTO videos (path) VALUES ($1)", "rollback.mp4");
        job = c.push(q, "{}");
        // Seen inside the transaction...
        EXPECT_EQ(c.job_status(job).state, JobState::Available);
        tx.rollback();
    }
    // ...and gone with it.
    EXPECT_EQ(videos_with("rollback.mp4"), 0);
    EXPECT_THROW(c.job_status(job), Error);
    expect_no_queue(q);
}

TEST_F(TransactionTest, DestructorRollsBack) {
    std::string q = unique_queue("tx");
    int64_t job = 0;
    try {
        Transaction tx(c);
        c.exec("INSERT INTO videos (path) VALUES ($1)", "thrown.mp4");
        job = c.push(q, "{}");
        throw std::runtime_error("the caller failed half-way");
    } catch (const std::runtime_error&) {
    }
    EXPECT_EQ(videos_with("thrown.mp4"), 0);
    try {
        c.job_status(job);
        FAIL() << "the job outlived its rolled-back transaction";
    } catch (const Error& e) {
        EXPECT_EQ(e.sqlstate(), "P0002");
    }
}

TEST_F(TransactionTest, CommitAfterAnErrorReportsTheRollback) {
    std::string q = unique_queue("tx");
    Transaction tx(c);
    c.push(q, "{}");
    EXPECT_THROW(c.exec("SELECT 1 / 0"), Error);
    try {
        tx.commit();
        FAIL() << "commit of an aborted transaction must not look like success";
    } catch (const Error& e) {
        EXPECT_EQ(e.sqlstate(), "25P02");
    }
    EXPECT_FALSE(c.connection().in_transaction());
    expect_no_queue(q);
}

TEST_F(TransactionTest, TransactionsDoNotNest) {
    Transaction tx(c);
    EXPECT_THROW(Transaction inner(c), Error);
}

// A BEGIN of the caller's own through exec: a Transaction on top would end the caller's
// transaction with its commit or rollback.
TEST_F(TransactionTest, RefusesAConnectionAlreadyInATransaction) {
    c.exec("BEGIN");
    try {
        Transaction tx(c);
        ADD_FAILURE() << "a Transaction was opened inside a transaction begun through exec";
    } catch (const Error& e) {
        EXPECT_EQ(e.sqlstate(), "25001");
    }
    c.exec("ROLLBACK");
}

// After a scope left by an exception, the work in it must stay undone: a pull still in flight
// there kept the ROLLBACK from being sent, and the next Transaction's commit committed it.
TEST_F(TransactionTest, DestructorRollsBackWithAPullInFlight) {
    std::string q = unique_queue("tx");
    c.queue_create(q);
    int64_t undone = 0;
    try {
        Transaction tx(c);
        undone = c.push(q, R"({"job": "to be undone"})");
        PullOptions po;
        po.wait = 5s;
        c.begin_pull(q, po);
        throw std::runtime_error("the caller failed half-way");
    } catch (const std::runtime_error&) {
    }
    EXPECT_FALSE(c.connection().in_transaction());
    int64_t kept;
    {
        Transaction tx(c);
        kept = c.push(q, "{}");
        tx.commit();
    }
    Client other{conninfo()};
    EXPECT_EQ(other.job_status(kept).state, JobState::Available);
    try {
        other.job_status(undone);
        ADD_FAILURE() << "the job of the rolled-back scope was committed by a later transaction";
    } catch (const Error& e) {
        EXPECT_EQ(e.sqlstate(), "P0002");
    }
}

TEST_F(TransactionTest, RollbackCancelsAPullInFlight) {
    std::string q = unique_queue("tx");
    c.queue_create(q);
    std::string other_q = unique_queue("tx");
    c.queue_create(other_q);
    Transaction tx(c);
    int64_t undone = c.push(q, "{}");
    PullOptions po;
    po.wait = 10s;
    c.begin_pull(other_q, po);  // an empty queue: the pull waits in the server
    auto t0 = std::chrono::steady_clock::now();
    tx.rollback();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "the pull was not cancelled";
    EXPECT_FALSE(c.connection().in_transaction());
    {
        Transaction next(c);
        c.push(q, "{}");
        next.commit();
    }
    EXPECT_THROW(c.job_status(undone), Error);
}

// A statement sent through connection() that the client cannot end: the connection is dropped,
// so that the server rolls back, rather than left inside the transaction.
TEST_F(TransactionTest, RollbackThatCannotBeSentDropsTheConnection) {
    std::string q = unique_queue("tx");
    c.queue_create(q);
    int64_t undone;
    {
        Transaction tx(c);
        undone = c.push(q, "{}");
        c.connection().send_prepared("tx_test_sleep", "SELECT pg_sleep(0.2)", {});
        tx.rollback();
    }
    EXPECT_FALSE(c.connection().in_transaction());
    {
        Transaction next(c);  // reconnects
        c.push(q, "{}");
        next.commit();
    }
    EXPECT_THROW(c.job_status(undone), Error);
}

// A ROLLBACK run through exec ended the transaction: what follows it commits on its own, and a
// commit() reporting success would claim it for the transaction.
TEST_F(TransactionTest, CommitAfterTheTransactionWasEndedInsideItIsRefused) {
    Transaction tx(c);
    c.exec("INSERT INTO videos (path) VALUES ($1)", "ended-inside.mp4");
    c.exec("ROLLBACK");
    try {
        tx.commit();
        ADD_FAILURE() << "commit() reported success for a transaction ended inside it";
    } catch (const Error& e) {
        EXPECT_EQ(e.sqlstate(), "25000");
        EXPECT_STREQ(e.what(), "the transaction was ended by a statement inside it");
    }
    EXPECT_EQ(videos_with("ended-inside.mp4"), 0);
}

// What the transcoder does: update its own row and complete the job atomically.
TEST_F(TransactionTest, CompleteWithUpdatesOwnRowAtomically) {
    std::string q = unique_queue("tx");
    auto vid = c.exec("INSERT INTO videos (path) VALUES ($1) RETURNING id", "done.mp4").int64(0, 0);
    int64_t id = c.push(q, "{}");
    Job job = c.pull(q).at(0);
    Client handler_conn(conninfo());
    JobContext ctx(job, handler_conn, nullptr);
    EXPECT_TRUE(ctx.complete_with(
        [&](Client& h) { h.exec("UPDATE videos SET status = 'processed' WHERE id = $1", vid); },
        std::string(R"({"playlist": "index.m3u8"})")));
    EXPECT_TRUE(ctx.finished());
    EXPECT_EQ(c.exec("SELECT status FROM videos WHERE id = $1", vid).text(0, 0), "processed");
    JobInfo s = c.job_status(id);
    EXPECT_EQ(s.state, JobState::Completed);
    EXPECT_EQ(s.result, R"({"playlist": "index.m3u8"})");
}

TEST_F(TransactionTest, CompleteWithRollsBackWhenTheJobIsLost) {
    std::string q = unique_queue("tx");
    auto vid = c.exec("INSERT INTO videos (path) VALUES ($1) RETURNING id", "lost.mp4").int64(0, 0);
    int64_t id = c.push(q, "{}");
    Job job = c.pull(q).at(0);
    ASSERT_TRUE(c.cancel(id));
    Client handler_conn(conninfo());
    JobContext ctx(job, handler_conn, nullptr);
    EXPECT_FALSE(ctx.complete_with(
        [&](Client& h) { h.exec("UPDATE videos SET status = 'processed' WHERE id = $1", vid); }));
    EXPECT_FALSE(ctx.finished());
    EXPECT_EQ(c.exec("SELECT status FROM videos WHERE id = $1", vid).text(0, 0), "pending")
        << "the row update must roll back with the failed completion";
    EXPECT_FALSE(handler_conn.connection().in_transaction());
}

TEST_F(TransactionTest, FailWithUpdatesOwnRowKnowingTheNewState) {
    std::string q = unique_queue("tx");
    auto vid = c.exec("INSERT INTO videos (path) VALUES ($1) RETURNING id", "bad.mp4").int64(0, 0);
    PushOptions po;
    po.max_attempts = 2;
    int64_t id = c.push(q, "{}", po);
    Client handler_conn(conninfo());
    auto mark = [&](Client& h, JobState s) {
        h.exec("UPDATE videos SET status = $1 WHERE id = $2",
               std::string(s == JobState::Dead ? "failed" : "retrying"), vid);
    };
    Job first = c.pull(q).at(0);
    JobContext ctx1(first, handler_conn, nullptr);
    FailOptions now;
    now.retry_in = Duration(0);
    EXPECT_EQ(ctx1.fail_with("probe failed", now, mark), JobState::Available);
    EXPECT_EQ(c.exec("SELECT status FROM videos WHERE id = $1", vid).text(0, 0), "retrying");

    Job second = c.pull(q).at(0);
    JobContext ctx2(second, handler_conn, nullptr);
    EXPECT_EQ(ctx2.fail_with("probe failed again", {}, mark), JobState::Dead);
    EXPECT_TRUE(ctx2.finished());
    EXPECT_EQ(c.exec("SELECT status FROM videos WHERE id = $1", vid).text(0, 0), "failed");
    EXPECT_EQ(c.job_status(id).state, JobState::Dead);
    // A stale token changes nothing, and the caller's SQL does not run.
    JobContext stale(second, handler_conn, nullptr);
    bool ran = false;
    EXPECT_FALSE(stale.fail_with("late", {}, [&](Client&, JobState) { ran = true; }));
    EXPECT_FALSE(ran);
}

// Taking in the caller's transaction: the job is completed exactly when the caller's rows commit.
TEST_F(TransactionTest, TakeCompletesWithTheCommit) {
    std::string q = unique_queue("take");
    int64_t id = c.push(q, R"({"video": 7})");
    {
        Transaction tx(c);
        TakeOptions o;
        o.n = 5;
        o.worker = "take-test";
        std::vector<Job> jobs = c.take(q, o);
        ASSERT_EQ(jobs.size(), 1u);
        EXPECT_EQ(jobs[0].id, id);
        EXPECT_EQ(jobs[0].queue, q);
        EXPECT_EQ(jobs[0].payload, R"({"video": 7})");
        EXPECT_EQ(jobs[0].attempt, 1);
        EXPECT_EQ(jobs[0].lease_token, 0);
        c.exec("INSERT INTO videos (path, status, job_id) VALUES ($1, 'done', $2)", "take.mp4", id);
        tx.commit();
    }
    EXPECT_EQ(videos_with("take.mp4"), 1);
    JobInfo info = c.job_status(id);
    EXPECT_EQ(info.state, JobState::Completed);
    EXPECT_EQ(info.worker, std::optional<std::string>("take-test"));
    EXPECT_TRUE(c.take(q).empty());
}

// A take with a wait sleeps in the server until a job is pushed, inside the caller's transaction.
TEST_F(TransactionTest, TakeWaitsForAPush) {
    std::string q = unique_queue("takewait");
    c.queue_create(q);
    int64_t pushed = 0;
    std::thread producer([&] {
        Client other{conninfo()};
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        pushed = other.push(q, R"({"late": true})");
    });
    Transaction tx(c);
    TakeOptions o;
    o.wait = std::chrono::seconds(30);
    auto t0 = std::chrono::steady_clock::now();
    std::vector<Job> jobs = c.take(q, o);
    auto waited = std::chrono::steady_clock::now() - t0;
    producer.join();
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].id, pushed);
    EXPECT_LT(waited, std::chrono::seconds(10));
    tx.commit();
    EXPECT_EQ(c.job_status(pushed).state, JobState::Completed);
}

TEST_F(TransactionTest, TakeRolledBackLeavesTheJobUntouched) {
    std::string q = unique_queue("take");
    int64_t id = c.push(q, "{}");
    {
        Transaction tx(c);
        ASSERT_EQ(c.take(q).size(), 1u);
        c.exec("INSERT INTO videos (path) VALUES ($1)", "take-rollback.mp4");
        tx.rollback();
    }
    EXPECT_EQ(videos_with("take-rollback.mp4"), 0);
    JobInfo info = c.job_status(id);
    EXPECT_EQ(info.state, JobState::Available);
    EXPECT_EQ(info.attempt, 0);
    // Another worker takes it next, as if nothing had happened.
    Client other(conninfo());
    std::vector<Job> again = other.take(q);
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].id, id);
}

// The work fails: the transaction rolls back (the job is available again, attempt not yet
// counted) and the failure is recorded, so the job waits out its backoff, then dies.
TEST_F(TransactionTest, FailedTakeCountsTheAttempt) {
    std::string q = unique_queue("take");
    QueueOptions qo;
    qo.max_attempts = 2;
    c.queue_create(q, qo);
    int64_t id = c.push(q, "{}");
    auto attempt = [&]() -> std::optional<JobState> {
        std::vector<Job> jobs;
        try {
            Transaction tx(c);
            jobs = c.take(q);
            if (jobs.empty()) return std::nullopt;
            c.exec("INSERT INTO videos (path) VALUES ($1)", "take-fail.mp4");
            throw std::runtime_error("transcoder crashed");
        } catch (const std::runtime_error& e) {
            FailOptions fo;
            fo.retry_in = std::chrono::seconds(0);
            return c.fail_taken(jobs.at(0).id, e.what(), fo, std::string("take-test"));
        }
    };
    EXPECT_EQ(attempt(), JobState::Available);
    JobInfo info = c.job_status(id);
    EXPECT_EQ(info.attempt, 1);
    EXPECT_EQ(info.last_error, std::optional<std::string>("transcoder crashed"));
    EXPECT_EQ(attempt(), JobState::Dead);
    EXPECT_EQ(c.job_status(id).state, JobState::Dead);
    EXPECT_EQ(c.job_status(id).attempt, 2);
    EXPECT_EQ(videos_with("take-fail.mp4"), 0);
    // Finished: nothing to fail any more.
    EXPECT_EQ(c.fail_taken(id, "late"), std::nullopt);
}

TEST_F(TransactionTest, TakeFromALimitedQueueIsRefused) {
    std::string q = unique_queue("take");
    c.push(q, "{}");
    c.exec("SELECT hopper.queue_set_concurrency($1, 1, NULL)", q);
    try {
        c.take(q);
        ADD_FAILURE() << "take from a limited queue succeeded";
    } catch (const Error& e) {
        EXPECT_EQ(e.sqlstate(), "0A000");
    }
    EXPECT_EQ(c.stats(q).at(0).available, 1);
}

}  // namespace
}  // namespace hopper
