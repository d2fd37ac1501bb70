// The client's SQL never calls an operator planted on the caller's search_path: PostgreSQL has no
// *(numeric, integer), *(bigint, interval), ||(text, bigint) or =(hopper.job_state, ...) of its
// own, so one created in public for those exact types wins over the pg_catalog operator reached by
// a cast, and runs as whoever calls the client (a worker's role, a superuser). The operators come
// from sql/include/plant_operators.sql, in this program's own database: every call of one bumps
// public.planted_calls.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <sstream>

#include "hopper/client.hpp"
#include "hopper/take_worker.hpp"
#include "hopper/worker.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using hopper::test::conninfo;
using hopper::test::eventually;
using hopper::test::unique_queue;

namespace hopper {
namespace {

class PlantedOperators : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        std::ifstream in(HOPPER_PLANT_OPERATORS_SQL);
        ASSERT_TRUE(in) << "cannot read " << HOPPER_PLANT_OPERATORS_SQL;
        std::stringstream sql;
        sql << in.rdbuf();
        Client c(conninfo());
        c.exec(sql.str());
    }

    // Calls of planted operators so far; read without an operator of its own.
    int64_t calls() {
        return c
            .exec(
                "SELECT CASE WHEN is_called THEN last_value ELSE 0 END "
                "FROM public.planted_calls")
            .int64(0, 0);
    }

    Client c{conninfo()};
};

// The planted operators are live: an unqualified expression of those types calls one.
TEST_F(PlantedOperators, AreCalledByUnqualifiedSql) {
    int64_t before = calls();
    c.exec(
        "SELECT pg_catalog.now() - interval '1 hour' < pg_catalog.now(), "
        "EXTRACT(epoch FROM pg_catalog.now()) * 1000000");
    EXPECT_EQ(calls(), before + 1);
}

TEST_F(PlantedOperators, ProducerAndWorkerCallsCallNone) {
    std::string q = unique_queue("planted");
    QueueOptions qo;
    qo.lease = 30s;
    qo.backoff_base = 1s;
    qo.backoff_cap = 1h;
    qo.retention = 24h;
    qo.jitter = 0.1;
    int64_t before = calls();
    ASSERT_TRUE(c.queue_create(q, qo));

    PushOptions later;
    later.run_at = Clock::now() + 1h;
    later.kind = "report";
    later.priority = -1;
    int64_t scheduled = c.push(q, R"({"n": 0})", later);
    PushOptions windowed;
    windowed.dedup_key = "k";
    windowed.dedup_window = 10min;
    windowed.concurrency_key = "tenant";
    c.push(q, R"({"n": 1})", windowed);
    BatchPushOptions batch;
    batch.run_at = Clock::now();
    c.push_batch(q, {R"({"n": 2})", R"({"n": 3})", R"({"n": 4})"}, batch);
    EXPECT_EQ(calls(), before) << "pushes";

    EXPECT_FALSE(c.stats(q).empty());
    EXPECT_EQ(c.jobs(q).size(), 5u);
    EXPECT_EQ(c.jobs(q, JobState::Scheduled).size(), 1u);
    EXPECT_EQ(c.job_status(scheduled).state, JobState::Scheduled);
    EXPECT_EQ(calls(), before) << "stats, jobs, job_status";

    PullOptions po;
    po.lease = 1min;
    po.worker = "planted";
    po.at = Clock::now();
    std::vector<Job> jobs = c.pull(q, po);
    ASSERT_EQ(jobs.size(), 1u);
    const Job& j = jobs[0];
    EXPECT_TRUE(c.heartbeat(j.id, j.lease_token, 2min));
    EXPECT_TRUE(c.progress(j.id, j.lease_token, 0.5, R"({"step": 1})"));
    FailOptions retry_soon;
    retry_soon.retry_in = 1ms;
    EXPECT_TRUE(c.fail(j.id, j.lease_token, "boom", retry_soon).has_value());
    EXPECT_EQ(calls(), before) << "pull, heartbeat, progress, fail";

    Job next = c.pull(q).at(0);
    EXPECT_TRUE(c.release(next.id, next.lease_token));
    Job again = c.pull(q).at(0);
    std::vector<int64_t> completed;
    std::vector<Job> more =
        c.complete_many_and_pull({again.id}, {again.lease_token}, {}, q, PullOptions{}, completed);
    EXPECT_EQ(completed, std::vector<int64_t>{again.id});
    ASSERT_EQ(more.size(), 1u);
    EXPECT_TRUE(c.complete(more[0].id, more[0].lease_token, R"({"ok": true})"));
    EXPECT_EQ(calls(), before) << "release, complete_many_and_pull, complete";

    EXPECT_TRUE(c.cancel(scheduled));
    EXPECT_TRUE(c.retry(scheduled));
    EXPECT_TRUE(c.cancel(scheduled));
    EXPECT_TRUE(c.wait_for(scheduled, 5s).has_value());
    EXPECT_EQ(calls(), before) << "cancel, retry, wait_for";
}

TEST_F(PlantedOperators, TakesCallNone) {
    std::string q = unique_queue("planted_take");
    ASSERT_TRUE(c.queue_create(q));
    c.push_batch(q, {R"({"n": 1})", R"({"n": 2})"});
    int64_t before = calls();
    {
        Transaction tx(c);
        TakeOptions to;
        to.n = 2;
        to.at = Clock::now();
        std::vector<Job> taken = c.take(q, to);
        ASSERT_EQ(taken.size(), 2u);
        FailOptions fo;
        fo.retry_in = 1h;
        EXPECT_TRUE(c.fail_taken(taken[1].id, "boom", fo).has_value());
        tx.commit();
    }
    EXPECT_EQ(calls(), before);
}

TEST_F(PlantedOperators, WorkersCallNone) {
    std::string q = unique_queue("planted_workers");
    ASSERT_TRUE(c.queue_create(q));
    c.push_batch(q, {R"({"n": 1})", R"({"n": 2})", R"({"n": 3})", R"({"n": 4})"});
    int64_t before = calls();

    WorkerOptions wo;
    wo.conninfo = conninfo();
    wo.queue = q;
    wo.max_jobs = 2;
    wo.handle_signals = false;
    wo.poll_interval = 200ms;
    Worker w(wo);
    w.on_any([](JobContext& job) { job.progress(0.5); });
    w.run();
    EXPECT_EQ(w.stats().completed, 2u);

    TakeWorkerOptions to;
    to.conninfo = conninfo();
    to.queue = q;
    to.batch = 2;
    to.handle_signals = false;
    to.poll_interval = 200ms;
    TakeWorker tw(to);
    std::atomic<int> handled{0};
    tw.on_any([&](const Job&, Client&) { ++handled; });
    {
        test::Running<TakeWorker> running(tw);
        ASSERT_TRUE(eventually([&] { return handled.load() == 2; }));
    }
    EXPECT_EQ(tw.stats().completed, 2u);
    EXPECT_EQ(calls(), before);
}

}  // namespace
}  // namespace hopper
