// The worker runtime against a real server: handlers by kind, failures, progress, heartbeats,
// stop flags, graceful shutdown, and no job handled twice across threads and processes.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
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

WorkerOptions options(const std::string& queue, int concurrency = 2) {
    WorkerOptions o;
    o.conninfo = conninfo();
    o.queue = queue;
    o.concurrency = concurrency;
    o.handle_signals = false;
    o.poll_interval = 500ms;
    o.log = [](const std::string&) {};
    return o;
}

using Running = test::Running<Worker>;

bool state_is(Client& c, int64_t id, JobState s) {
    return c.job_status(id).state == s;
}

TEST(Worker, RunsHandlersByKindAndStoresResults) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    Worker w(options(q, 4));
    std::atomic<int> resized{0}, mailed{0};
    w.on("resize", [&](JobContext& job) {
        ++resized;
        job.set_result(fmt::format(R"({{"attempt": {}}})", job.attempt()));
    });
    w.on("mail", [&](JobContext&) { ++mailed; });
    Running r(w);
    PushOptions resize, mail;
    resize.kind = "resize";
    mail.kind = "mail";
    std::vector<int64_t> ids;
    for (int i = 0; i < 20; ++i) ids.push_back(c.push(q, "{}", i % 2 ? resize : mail));
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).completed == 20; }, 60s));
    EXPECT_EQ(resized.load(), 10);
    EXPECT_EQ(mailed.load(), 10);
    EXPECT_EQ(c.job_status(ids[1]).result, R"({"attempt": 1})");
    r.stop();
    EXPECT_EQ(w.stats().completed, 20u);
}

TEST(Worker, CompletesEachJobOnItsOwnWhenNotBatching) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    WorkerOptions o = options(q, 3);
    o.batch_completions = false;
    Worker w(o);
    w.on_any([](JobContext& job) { job.set_result(fmt::format(R"({{"id": {}}})", job.id())); });
    Running r(w);
    std::vector<int64_t> ids = c.push_batch(q, std::vector<std::string>(12, "{}"));
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).completed == 12; }, 60s));
    EXPECT_EQ(c.job_status(ids[5]).result, fmt::format(R"({{"id": {}}})", ids[5]));
    r.stop();
    EXPECT_EQ(w.stats().completed, 12u);
    EXPECT_EQ(w.stats().lost, 0u);
}

TEST(Worker, BatchedCompletionsKeepEachJobsResult) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    std::vector<int64_t> ids = c.push_batch(q, std::vector<std::string>(40, "{}"));
    Worker w(options(q, 4));
    w.on_any([](JobContext& job) { job.set_result(fmt::format(R"({{"id": {}}})", job.id())); });
    Running r(w);
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).completed == 40; }, 60s));
    r.stop();
    for (int64_t id : ids) EXPECT_EQ(c.job_status(id).result, fmt::format(R"({{"id": {}}})", id));
    EXPECT_EQ(w.stats().completed, 40u);
    EXPECT_EQ(w.stats().lost, 0u);
}

TEST(Worker, AJobDeletedWhileRunningDoesNotHoldUpTheOthers) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    std::atomic<int> handled{0};
    Worker w(options(q, 2));
    w.on_any([&](JobContext& job) {
        // The job's row disappears under the handler: its completion fails (P0002), the
        // batch it was in is completed one by one instead.
        if (job.payload().find("gone") != std::string::npos)
            job.client().exec("DELETE FROM hopper.jobs WHERE id = $1", job.id());
        ++handled;
    });
    Running r(w);
    std::vector<int64_t> ids = c.push_batch(q, {R"({"gone": 1})", "{}", "{}", "{}"});
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).completed == 3; }, 60s));
    // The other three can be completed while the deleting handler is still on its way out.
    EXPECT_TRUE(eventually([&] { return handled.load() == 4; }, 60s)) << handled.load();
    int64_t later = c.push(q, "{}");
    ASSERT_TRUE(eventually([&] { return state_is(c, later, JobState::Completed); }, 60s))
        << "the worker carries on";
    r.stop();
    EXPECT_EQ(w.stats().completed, 4u);
}

// Opened once by the test; handlers wait on it for as long as it takes. (Gate's wait gives up
// after 5 s.) The test opens it on every way out, so that no handler is left waiting.
class Latch {
  public:
    void open() {
        {
            std::lock_guard<std::mutex> lock(m_);
            open_ = true;
        }
        cv_.notify_all();
    }
    void wait() {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return open_; });
    }

  private:
    std::mutex m_;
    std::condition_variable cv_;
    bool open_ = false;
};

// Sessions named `queue` waiting for a lock inside `function`.
int64_t waiting_for_lock(Client& c, const std::string& queue, const std::string& function) {
    return c
        .exec(
            "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE application_name = $1"
            " AND wait_event_type = 'Lock' AND query LIKE '%' || $2 || '%'",
            queue, function)
        .int64(0, 0);
}

// Jobs whose handlers returned wait for the fetch loop to complete them together. When that
// completion is held up (here another session holds the row of the batch's first job, so the
// batch waits for it), the jobs waiting behind it are still heartbeated: no other worker takes
// them over when their lease would have run out, and each runs once.
TEST(Worker, JobsWaitingForABatchedCompletionKeepTheirLease) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    QueueOptions qo;
    qo.lease = 1s;  // heartbeats every 333 ms
    c.queue_create(q, qo);
    WorkerOptions o = options(q, 2);
    o.conninfo = test::named_conninfo(q);
    o.prefetch = 0;
    Worker w(o);
    Latch first_go, second_go;
    std::atomic<int> runs{0};
    w.on("first", [&](JobContext&) {
        ++runs;
        first_go.wait();
    });
    w.on("second", [&](JobContext&) {
        ++runs;
        second_go.wait();
    });
    PushOptions first, second;
    first.kind = "first";
    second.kind = "second";
    int64_t a = c.push(q, "{}", first);
    int64_t b = c.push(q, "{}", second);
    Running r(w);
    // Declared after the worker, so that a test ended early lets the handlers go before the
    // worker's shutdown waits for them.
    struct OpenOnExit {
        Latch& a;
        Latch& b;
        ~OpenOnExit() {
            a.open();
            b.open();
        }
    } open_on_exit{first_go, second_go};
    ASSERT_TRUE(eventually([&] { return runs.load() == 2; }, 30s));
    Client locker(conninfo());
    locker.exec("BEGIN");
    locker.exec("SELECT 1 FROM hopper.jobs WHERE id = $1 FOR UPDATE", a);
    first_go.open();
    // The fetch loop's completion of the first job waits for the row.
    ASSERT_TRUE(
        eventually([&] { return waiting_for_lock(c, q, "queue_complete_many") == 1; }, 30s));
    second_go.open();  // its completion waits behind the first one's
    Client thief(conninfo());
    auto until = std::chrono::steady_clock::now() + 3s;
    while (std::chrono::steady_clock::now() < until) {
        EXPECT_TRUE(thief.pull(q).empty()) << "a job whose handler succeeded was taken over";
        std::this_thread::sleep_for(100ms);
    }
    locker.exec("ROLLBACK");
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).completed == 2; }, 30s));
    r.stop();
    for (int64_t id : {a, b}) EXPECT_EQ(c.job_status(id).attempt, 1) << "job " << id;
    EXPECT_EQ(runs.load(), 2);
    EXPECT_EQ(w.stats().completed, 2u);
    EXPECT_EQ(w.stats().lost, 0u);
}

TEST(Worker, PullsInBatchesWhenTheQueueIsDeep) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    std::vector<std::string> payloads(64, "{}");
    c.push_batch(q, payloads);
    WorkerOptions o = options(q, 8);
    o.max_batch = 8;
    Worker w(o);
    w.on_any([](JobContext&) { std::this_thread::sleep_for(2ms); });
    Running r(w);
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).completed == 64; }, 60s));
    r.stop();
    // One job per pull would take 64 pulls; refilling free slots in batches takes far fewer.
    EXPECT_LE(w.stats().pulls, 32u);
    EXPECT_GE(w.stats().pulls, 8u) << "never more than max_batch jobs per pull";
}

// A handler that blocks until the test lets it go, counting the jobs it has started. The wait is
// bounded so that a test failing before release() still ends.
struct Gate {
    std::mutex m;
    std::condition_variable cv;
    bool open = false;
    std::atomic<int> started{0};
    void pass() {
        ++started;
        std::unique_lock<std::mutex> lock(m);
        cv.wait_for(lock, 5s, [&] { return open; });
    }
    void release() {
        {
            std::lock_guard<std::mutex> lock(m);
            open = true;
        }
        cv.notify_all();
    }
};

TEST(Worker, PrefetchClaimsMoreThanTheFreeThreads) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    std::vector<int64_t> ids = c.push_batch(q, std::vector<std::string>(6, "{}"));
    WorkerOptions o = options(q, 1);
    o.prefetch = 3;
    Worker w(o);
    Gate gate;
    w.on_any([&](JobContext&) { gate.pass(); });
    Running r(w);
    ASSERT_TRUE(eventually([&] { return gate.started.load() == 1; }, 30s));
    // One thread, busy: the pull took it a job and three more to hold, and nothing else.
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).running == 4; }, 30s));
    std::this_thread::sleep_for(200ms);
    EXPECT_EQ(c.stats(q).at(0).running, 4);
    EXPECT_EQ(c.stats(q).at(0).available, 2);
    EXPECT_EQ(w.stats().pulls, 1u);
    EXPECT_EQ(gate.started.load(), 1) << "held jobs wait for a free thread";
    gate.release();
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).completed == 6; }, 30s));
}

TEST(Worker, WithoutPrefetchClaimsOnlyForFreeThreads) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    c.push_batch(q, std::vector<std::string>(6, "{}"));
    WorkerOptions o = options(q, 2);
    o.prefetch = 0;
    Worker w(o);
    Gate gate;
    w.on_any([&](JobContext&) { gate.pass(); });
    Running r(w);
    ASSERT_TRUE(eventually([&] { return gate.started.load() == 2; }, 30s));
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(c.stats(q).at(0).running, 2);
    EXPECT_EQ(c.stats(q).at(0).available, 4);
    gate.release();
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).completed == 6; }, 30s));
}

struct StopAtEnd {
    Worker& w;
    ~StopAtEnd() { w.stop(); }
};

// max_jobs claims no more than that, however many threads and held slots are free: a stop()
// after the last of them came too late for the other jobs the worker had claimed meanwhile, which
// it then ran too. Once they are done run() returns by itself, leaving the rest available.
TEST(Worker, MaxJobsClaimsNoMoreAndReturnsOnceTheyAreDone) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    std::vector<int64_t> ids = c.push_batch(q, std::vector<std::string>(6, "{}"));
    WorkerOptions o = options(q, 3);  // and 3 held: 6 slots
    o.max_jobs = 2;
    Worker w(o);
    Gate gate;
    w.on_any([&](JobContext&) { gate.pass(); });
    auto ran = std::async(std::launch::async, [&] { w.run(); });
    StopAtEnd stop_at_end{w};  // should a check fail before run() returned
    ASSERT_TRUE(eventually([&] { return gate.started.load() == 2; }, 30s));
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(c.stats(q).at(0).running, 2);
    EXPECT_EQ(c.stats(q).at(0).available, 4);
    gate.release();
    ASSERT_EQ(ran.wait_for(30s), std::future_status::ready) << "run() did not return";
    ran.get();
    QueueStat st = c.stats(q).at(0);
    EXPECT_EQ(st.completed, 2);
    EXPECT_EQ(st.available, 4);
    EXPECT_EQ(st.running, 0);
    EXPECT_EQ(gate.started.load(), 2);
    EXPECT_EQ(w.stats().completed, 2u);
    EXPECT_EQ(w.stats().released, 0u) << "a job claimed only to be given back";
    int attempted = 0;
    for (int64_t id : ids) attempted += c.job_status(id).attempt;
    EXPECT_EQ(attempted, 2);
}

// More than one pull's worth: the pulls, the waiting pull's too, stop at the limit.
TEST(Worker, MaxJobsSpansSeveralPulls) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    c.push_batch(q, std::vector<std::string>(3, "{}"));
    WorkerOptions o = options(q, 2);
    o.prefetch = 0;
    o.max_jobs = 7;
    Worker w(o);
    std::atomic<int> runs{0};
    w.on_any([&](JobContext&) { ++runs; });
    auto ran = std::async(std::launch::async, [&] { w.run(); });
    StopAtEnd stop_at_end{w};  // should a check fail before run() returned
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).completed == 3; }, 30s));
    // The queue ran dry: the worker waits for the 4 jobs it has left.
    std::this_thread::sleep_for(300ms);
    EXPECT_EQ(ran.wait_for(0s), std::future_status::timeout) << "run() returned early";
    c.push_batch(q, std::vector<std::string>(6, "{}"));
    ASSERT_EQ(ran.wait_for(30s), std::future_status::ready) << "run() did not return";
    ran.get();
    QueueStat st = c.stats(q).at(0);
    EXPECT_EQ(st.completed, 7);
    EXPECT_EQ(st.available, 2);
    EXPECT_EQ(st.running, 0);
    EXPECT_EQ(runs.load(), 7);
    EXPECT_EQ(w.stats().released, 0u);
}

TEST(Worker, PrefetchedJobsRunAndCompleteExactlyOnce) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    std::vector<int64_t> ids = c.push_batch(q, std::vector<std::string>(300, "{}"));
    WorkerOptions o = options(q, 3);
    o.prefetch = 13;
    Worker w(o);
    std::mutex m;
    std::map<int64_t, int> runs;
    w.on_any([&](JobContext& job) {
        std::lock_guard<std::mutex> lock(m);
        ++runs[job.id()];
    });
    Running r(w);
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).completed == 300; }, 30s));
    r.stop();
    ASSERT_EQ(runs.size(), 300u);
    for (int64_t id : ids) EXPECT_EQ(runs[id], 1) << "job " << id;
    EXPECT_EQ(w.stats().completed, 300u);
    EXPECT_EQ(w.stats().lost, 0u);
    EXPECT_LE(w.stats().pulls, 300u / 8) << "pulls take more than the free threads";
}

TEST(Worker, HeldJobsAreHeartbeatedPastTheirLease) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    QueueOptions qo;
    qo.lease = 1s;  // heartbeats every 333 ms
    c.queue_create(q, qo);
    std::vector<int64_t> ids = c.push_batch(q, {"{}", "{}"});
    WorkerOptions o = options(q, 1);
    o.prefetch = 1;
    Worker w(o);
    std::atomic<int> started{0};
    w.on_any([&](JobContext& job) {
        // The first job keeps the only thread for over two leases while the second waits.
        if (++started == 1) job.wait_for_stop(2500ms);
    });
    Running r(w);
    ASSERT_TRUE(eventually([&] { return started.load() == 1; }, 30s));
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).running == 2; }, 30s));
    Client thief(conninfo());
    auto until = std::chrono::steady_clock::now() + 2s;
    while (std::chrono::steady_clock::now() < until) {
        EXPECT_TRUE(thief.pull(q).empty()) << "a held job was taken over";
        std::this_thread::sleep_for(100ms);
    }
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).completed == 2; }, 30s));
    r.stop();
    for (int64_t id : ids) EXPECT_EQ(c.job_status(id).attempt, 1) << "job " << id;
    EXPECT_EQ(w.stats().completed, 2u);
    EXPECT_EQ(w.stats().lost, 0u);
}

TEST(Worker, AHeldJobLostMeanwhileIsNotStarted) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    QueueOptions qo;
    qo.lease = 1s;
    c.queue_create(q, qo);
    int64_t first = c.push(q, "{}");
    int64_t held = c.push(q, "{}");
    WorkerOptions o = options(q, 1);
    o.prefetch = 1;
    std::mutex m;
    std::vector<std::string> logged;
    o.log = [&](const std::string& msg) {
        std::lock_guard<std::mutex> lock(m);
        logged.push_back(msg);
    };
    Worker w(o);
    Gate gate;
    std::set<int64_t> ran;
    w.on_any([&](JobContext& job) {
        {
            std::lock_guard<std::mutex> lock(m);
            ran.insert(job.id());
        }
        if (job.id() == first) gate.pass();
    });
    Running r(w);
    ASSERT_TRUE(eventually([&] { return gate.started.load() == 1; }, 30s));
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).running == 2; }, 30s));
    // Another worker, an hour in the future, finds both leases expired and takes both jobs.
    PullOptions future;
    future.at = Clock::now() + 1h;
    future.n = 2;
    ASSERT_EQ(c.pull(q, future).size(), 2u);
    // The heartbeat learns the held job is gone before its thread is free.
    const std::string gone = fmt::format("job {} lease was lost: it will not be started", held);
    ASSERT_TRUE(eventually(
        [&] {
            std::lock_guard<std::mutex> lock(m);
            return std::find(logged.begin(), logged.end(), gone) != logged.end();
        },
        30s));
    gate.release();
    ASSERT_TRUE(eventually([&] { return w.stats().lost == 2; }, 30s));
    r.stop();
    std::lock_guard<std::mutex> lock(m);
    EXPECT_EQ(ran.count(held), 0u) << "a job no longer ours was started";
}

TEST(Worker, ShutdownReleasesHeldJobsWithoutUsingAnAttempt) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    std::vector<int64_t> ids = c.push_batch(q, std::vector<std::string>(4, "{}"));
    WorkerOptions o = options(q, 1);
    o.prefetch = 3;
    Worker w(o);
    std::atomic<int64_t> ran{0};
    std::atomic<int> started{0};
    w.on_any([&](JobContext& job) {
        ran = job.id();
        ++started;
        std::this_thread::sleep_for(300ms);
    });
    Running r(w);
    ASSERT_TRUE(eventually([&] { return started.load() == 1; }, 30s));
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).running == 4; }, 30s));
    r.stop();
    EXPECT_EQ(started.load(), 1);
    EXPECT_EQ(w.stats().released, 3u);
    EXPECT_EQ(c.stats(q).at(0).completed, 1);
    EXPECT_EQ(c.stats(q).at(0).available, 3);
    PullOptions all;
    all.n = 4;
    std::vector<Job> again = c.pull(q, all);
    ASSERT_EQ(again.size(), 3u);
    for (const Job& j : again) {
        EXPECT_NE(j.id, ran.load());
        EXPECT_EQ(j.attempt, 1) << "job " << j.id << ": a release is not an attempt";
        EXPECT_FALSE(c.job_status(j.id).last_error);
    }
}

// A held job is given back unstarted once stop() is called, also when a handler thread frees up
// before the fetch loop gets to its shutdown (here: its pull waits for the table the test
// locks). Jobs a waiting pull brings back as stop() cancels it are held the same way.
TEST(Worker, AHeldJobDoesNotStartAfterStop) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    PushOptions first, second, third;
    first.kind = "first";
    second.kind = "second";
    third.kind = "third";
    c.push(q, "{}", first);
    c.push(q, "{}", second);
    int64_t z = c.push(q, "{}", third);
    WorkerOptions o = options(q, 2);
    o.conninfo = test::named_conninfo(q);
    o.prefetch = 2;  // a slot stays free: the fetch loop goes on pulling
    o.waiting_pulls = false;
    o.poll_interval = 200ms;
    Worker w(o);
    std::atomic<bool> x_go{false}, y_go{false}, x_started{false}, y_started{false};
    std::atomic<int> z_started{0};
    w.on("first", [&](JobContext&) {
        x_started = true;
        while (!x_go) std::this_thread::sleep_for(10ms);
    });
    w.on("second", [&](JobContext&) {
        y_started = true;
        while (!y_go) std::this_thread::sleep_for(10ms);
    });
    w.on("third", [&](JobContext&) { ++z_started; });
    Running r(w);
    ASSERT_TRUE(eventually([&] { return x_started && y_started; }, 60s));
    ASSERT_TRUE(eventually([&] { return c.stats(q).at(0).running == 3; }, 30s));
    Client locker(conninfo());
    std::optional<Transaction> tx(std::in_place, locker);
    locker.exec("LOCK TABLE hopper.jobs IN ACCESS EXCLUSIVE MODE");
    ASSERT_TRUE(eventually(
        [&] {
            return c.exec(
                        "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE "
                        "application_name = $1 AND wait_event_type = 'Lock' AND query LIKE "
                        "'%queue_pull%'",
                        q)
                       .int64(0, 0) == 1;
        },
        30s));
    w.stop();
    y_go = true;  // its thread is free, the third job still held
    std::this_thread::sleep_for(1s);
    EXPECT_EQ(z_started.load(), 0) << "a held job started after stop()";
    tx.reset();  // rolled back: the pull goes on, then the shutdown
    x_go = true;
    r.stop();
    EXPECT_EQ(z_started.load(), 0);
    EXPECT_EQ(c.job_status(z).state, JobState::Available);
    EXPECT_EQ(w.stats().released, 1u);
    EXPECT_EQ(c.stats(q).at(0).completed, 2);
}

// stop() while the waiting pull has just claimed a job: the cancelled pull brings it back, and it
// is released, neither started nor left running (to an idle thread with no connection yet, which
// dropped it). The race is won about every other round; eight rounds catch it.
TEST(Worker, AJobTheCancelledWaitingPullBringsBackIsReleased) {
    Client c(conninfo());
    for (int round = 0; round < 8; ++round) {
        std::string q = unique_queue("w");
        c.queue_create(q);
        Worker w(test::slow_polling(options(q), q));
        std::atomic<bool> stopped{false};
        std::atomic<int> started_after_stop{0};
        w.on("first", [&](JobContext& job) {
            PushOptions po;
            po.kind = "second";
            job.client().push(q, "{}", po);  // the waiting pull claims it at once
            stopped = true;
            w.stop();
        });
        w.on("second", [&](JobContext&) {
            if (stopped) ++started_after_stop;
        });
        Running r(w);
        ASSERT_TRUE(eventually([&] { return test::waiting_in(c, q, "queue_pull") == 1; }, 30s));
        PushOptions po;
        po.kind = "first";
        c.push(q, "{}", po);
        r.stop();
        EXPECT_EQ(started_after_stop.load(), 0) << "round " << round;
        EXPECT_EQ(c.stats(q).at(0).running, 0) << "round " << round;
    }
}

TEST(Worker, PollsWhenNoNotificationArrives) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    c.queue_create(q);
    WorkerOptions o = options(q);
    o.waiting_pulls = false;
    o.poll_interval = 300ms;
    Worker w(o);
    std::atomic<int> handled{0};
    w.on_any([&](JobContext&) { ++handled; });
    Running r(w);
    // Let the worker's first (empty) pull pass, then push without a NOTIFY.
    std::this_thread::sleep_for(500ms);
    c.exec("SET hopper.notify = off");
    int64_t id = c.push(q, "{}");
    EXPECT_TRUE(eventually([&] { return state_is(c, id, JobState::Completed); }, 30s));
    EXPECT_EQ(handled.load(), 1);
}

WorkerOptions slow_polling(const std::string& queue) {
    return test::slow_polling(options(queue), queue);
}

int64_t waiting_pulls(Client& c, const std::string& queue) {
    return test::waiting_in(c, queue, "queue_pull");
}

TEST(Worker, AnIdleWorkerWaitsInTheServerAndStartsAPushAtOnce) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    c.queue_create(q);
    Worker w(slow_polling(q));
    std::atomic<int> handled{0};
    w.on_any([&](JobContext&) { ++handled; });
    Running r(w);
    ASSERT_TRUE(eventually([&] { return waiting_pulls(c, q) == 1; }, 10s));
    // No NOTIFY is sent, and the next poll is 20 s away: only the waiting pull can see the job.
    c.exec("SET hopper.notify = off");
    for (int i = 1; i <= 3; ++i) {
        auto pushed = std::chrono::steady_clock::now();
        int64_t id = c.push(q, "{}");
        ASSERT_TRUE(eventually([&] { return state_is(c, id, JobState::Completed); }, 10s));
        EXPECT_LT(std::chrono::steady_clock::now() - pushed, 1s) << "job " << i;
        ASSERT_TRUE(eventually([&] { return waiting_pulls(c, q) == 1; }, 10s));
    }
    EXPECT_EQ(handled.load(), 3);
}

TEST(Worker, AZeroPollIntervalStillWaitsInTheServer) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    c.queue_create(q);
    WorkerOptions o = slow_polling(q);
    o.poll_interval = 0ms;  // a wait of 0 would return at once, and the loop would spin
    Worker w(o);
    w.on_any([](JobContext&) {});
    Running r(w);
    EXPECT_TRUE(eventually([&] { return waiting_pulls(c, q) == 1; }, 10s));
    int64_t id = c.push(q, "{}");
    EXPECT_TRUE(eventually([&] { return state_is(c, id, JobState::Completed); }, 10s));
}

TEST(Worker, JobsFinishingWhileThePullWaitsAreCompletedAtOnce) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    c.queue_create(q);
    WorkerOptions o = slow_polling(q);
    o.concurrency = 2;
    o.prefetch = 0;
    Worker w(o);
    std::mutex mu;
    std::condition_variable cv;
    bool go = false;
    w.on("slow", [&](JobContext&) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return go; });
    });
    w.on_any([](JobContext&) {});
    Running r(w);
    c.exec("SET hopper.notify = off");
    PushOptions slow;
    slow.kind = "slow";
    int64_t held = c.push(q, "{}", slow);
    ASSERT_TRUE(eventually([&] { return state_is(c, held, JobState::Running); }, 10s));
    // One thread is busy: the fetch loop waits in the server for the other one's job.
    ASSERT_TRUE(eventually([&] { return waiting_pulls(c, q) == 1; }, 10s));
    {
        std::lock_guard<std::mutex> lock(mu);
        go = true;
    }
    cv.notify_all();
    // Its completion goes out on the fetch loop's own connection while the pull keeps waiting.
    ASSERT_TRUE(eventually([&] { return state_is(c, held, JobState::Completed); }, 5s));
    EXPECT_EQ(waiting_pulls(c, q), 1);
    int64_t next = c.push(q, "{}");
    EXPECT_TRUE(eventually([&] { return state_is(c, next, JobState::Completed); }, 5s));
}

// A login role of the hopper_worker group, made for one test: `limit(0)` keeps it from opening
// more sessions, as a connection limit on a role or database would. Dropped at the end.
class LimitedRole {
  public:
    LimitedRole(Client& c, const std::string& prefix)
        : c_(c), name_(fmt::format("{}_{}", prefix, ::getpid())) {
        c_.exec("DROP ROLE IF EXISTS " + name_);
        c_.exec("CREATE ROLE " + name_ + " LOGIN IN ROLE hopper_worker");
    }
    ~LimitedRole() {
        try {
            limit(-1);
            c_.exec(
                "SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity "
                "WHERE usename = $1",
                name_);
            eventually([&] {
                return c_.exec(
                             "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE usename = $1",
                             name_)
                           .int64(0, 0) == 0;
            });
            c_.exec("DROP ROLE IF EXISTS " + name_);
        } catch (const std::exception&) {
            // Dropped by the next run's DROP ROLE IF EXISTS.
        }
    }
    const std::string& name() const { return name_; }
    void limit(int connections) {
        c_.exec(fmt::format("ALTER ROLE {} CONNECTION LIMIT {}", name_, connections));
    }

  private:
    Client& c_;
    std::string name_;
};

// Ends the waiting pull of the worker whose sessions carry `queue`'s name.
void terminate_waiting_pull(Client& c, const std::string& queue) {
    c.exec(
        "SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity "
        "WHERE application_name = $1 AND state = 'active' AND query LIKE '%queue_pull%'",
        queue);
}

// A waiting pull whose connection cannot come back (here: its role may open no more sessions)
// while the fetch loop's own connection works: the loop still pulls and completes jobs, and the
// waiting pull is retried with a back-off of its own that grows. The loop's successful pulls
// reset a back-off shared by both, so it was retried (and logged) every min_backoff.
TEST(Worker, AWaitingPullThatCannotReconnectBacksOffWhileTheOthersWork) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    c.queue_create(q);
    LimitedRole role(c, "hopper_test_backoff");

    WorkerOptions o = slow_polling(q);
    o.conninfo += " user=" + role.name();
    o.concurrency = 1;
    std::mutex mu;
    std::vector<std::pair<std::chrono::steady_clock::time_point, std::string>> lines;
    o.log = [&](const std::string& line) {
        std::lock_guard<std::mutex> lock(mu);
        lines.emplace_back(std::chrono::steady_clock::now(), line);
    };
    Worker w(o);
    w.on_any([](JobContext&) {});
    {
        Running r(w);
        // A first job, so that the handler thread has its connection before the limit.
        int64_t first = c.push(q, "{}");
        ASSERT_TRUE(eventually([&] { return state_is(c, first, JobState::Completed); }, 10s));
        ASSERT_TRUE(eventually([&] { return waiting_pulls(c, q) == 1; }, 10s));
        role.limit(0);
        auto cut = std::chrono::steady_clock::now();
        terminate_waiting_pull(c, q);
        int64_t second = c.push(q, "{}");
        EXPECT_TRUE(eventually([&] { return state_is(c, second, JobState::Completed); }, 10s))
            << "the fetch loop's own connection still pulls";
        std::this_thread::sleep_for(cut + 3500ms - std::chrono::steady_clock::now());
        int failures = 0;
        {
            std::lock_guard<std::mutex> lock(mu);
            for (const auto& [at, line] : lines)
                if (at - cut <= 3500ms && line.find("failed (retrying in") != std::string::npos)
                    ++failures;
        }
        // Doubling from 100 ms: attempts at about 0, 0.1, 0.3, 0.7, 1.5 and 3.1 s. Every 100 ms
        // would be 35.
        EXPECT_GE(failures, 2);
        EXPECT_LE(failures, 10);
        // The connection back: the worker waits in the server again.
        role.limit(-1);
        EXPECT_TRUE(eventually([&] { return waiting_pulls(c, q) == 1; }, 20s));
    }
}

// A waiting pull that cannot reconnect must not stall the fetch loop for its back-off: a job that
// finishes meanwhile is completed (in the batch of the loop's own connection) at once, not when
// the waiting pull is next tried. The loop paused for the back-off, up to max_backoff, each time
// the queue ran dry, and the finished job waited unheartbeated.
TEST(Worker, AWaitingPullThatCannotReconnectDoesNotHoldUpCompletions) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    c.queue_create(q);
    LimitedRole role(c, "hopper_test_stall");
    WorkerOptions o = slow_polling(q);
    o.conninfo += " user=" + role.name();
    o.concurrency = 2;
    o.prefetch = 0;
    o.min_backoff = 8s;
    o.max_backoff = 8s;
    std::atomic<int> waiter_failures{0};
    o.log = [&](const std::string& line) {
        if (line.find("waiting pull on") != std::string::npos) ++waiter_failures;
    };
    Worker w(o);
    std::mutex mu;
    std::condition_variable cv;
    bool go = false;
    w.on("slow", [&](JobContext& job) {
        job.progress(0.5);  // the heartbeat's connection is open before the limit
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return go; });
    });
    w.on_any([](JobContext&) {});
    Running r(w);
    PushOptions slow;
    slow.kind = "slow";
    int64_t held = c.push(q, "{}", slow);
    ASSERT_TRUE(eventually([&] { return c.job_status(held).progress == 0.5; }, 10s));
    ASSERT_TRUE(eventually([&] { return waiting_pulls(c, q) == 1; }, 10s));
    role.limit(0);
    terminate_waiting_pull(c, q);
    ASSERT_TRUE(eventually([&] { return waiter_failures.load() >= 1; }, 5s));
    {
        std::lock_guard<std::mutex> lock(mu);
        go = true;
    }
    cv.notify_all();
    EXPECT_TRUE(eventually([&] { return state_is(c, held, JobState::Completed); }, 3s))
        << "completed only after the waiting pull's back-off";
    EXPECT_EQ(waiter_failures.load(), 1) << "the waiting pull is not retried before its back-off";
    // The waiting pull comes back at its retry.
    role.limit(-1);
    EXPECT_TRUE(eventually([&] { return waiting_pulls(c, q) == 1; }, 15s));
    int64_t next = c.push(q, "{}");
    EXPECT_TRUE(eventually([&] { return state_is(c, next, JobState::Completed); }, 5s));
}

// A handler's own report (a failure always goes on its thread's connection) that cannot get
// through, here because that connection was lost and cannot come back for a while, is made again
// for up to a minute: meanwhile the job keeps its lease, so no other worker runs it again, and the
// outcome recorded at last is the handler's.
TEST(Worker, AJobWhoseReportIsRetriedKeepsItsLease) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    QueueOptions qo;
    qo.lease = 1s;  // heartbeats every 333 ms
    qo.max_attempts = 1;
    c.queue_create(q, qo);
    LimitedRole role(c, "hopper_test_report");
    WorkerOptions o = options(q, 1);
    o.conninfo += " user=" + role.name();
    o.prefetch = 0;
    o.max_backoff = 1s;
    Worker w(o);
    Latch fail_now;
    std::atomic<int> pid{0}, runs{0};
    w.on_any([&](JobContext& job) {
        ++runs;
        job.progress(0.5);  // the heartbeat's connection is open before the limit
        pid = job.client().connection().backend_pid();
        fail_now.wait();
        throw std::runtime_error("boom");
    });
    int64_t id = c.push(q, "{}");
    Running r(w);
    struct OpenOnExit {  // declared after the worker: a test ended early lets the handler go
        Latch& l;
        ~OpenOnExit() { l.open(); }
    } open_on_exit{fail_now};
    ASSERT_TRUE(eventually([&] { return c.job_status(id).progress == 0.5 && pid.load() != 0; }));
    role.limit(0);
    c.exec("SELECT pg_catalog.pg_terminate_backend($1)", pid.load());
    fail_now.open();
    Client thief(conninfo());
    auto until = std::chrono::steady_clock::now() + 3s;
    while (std::chrono::steady_clock::now() < until) {
        EXPECT_TRUE(thief.pull(q).empty()) << "a job whose failure was being reported was taken";
        std::this_thread::sleep_for(100ms);
    }
    role.limit(-1);
    ASSERT_TRUE(eventually([&] { return state_is(c, id, JobState::Dead); }, 30s));
    JobInfo info = c.job_status(id);
    EXPECT_EQ(info.attempt, 1);
    EXPECT_EQ(info.last_error.value_or(""), "boom");
    EXPECT_EQ(runs.load(), 1);
    r.stop();
    EXPECT_EQ(w.stats().failed, 1u);
}

TEST(Worker, StopEndsAWaitingPullAtOnce) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    c.queue_create(q);
    Worker w(slow_polling(q));
    w.on_any([](JobContext&) {});
    auto started = std::chrono::steady_clock::now();
    std::thread t([&] { w.run(); });
    bool waited = eventually([&] { return waiting_pulls(c, q) == 1; }, 10s);
    auto stopping = std::chrono::steady_clock::now();
    w.stop();
    t.join();
    ASSERT_TRUE(waited);
    EXPECT_LT(std::chrono::steady_clock::now() - stopping, 3s);
    EXPECT_LT(std::chrono::steady_clock::now() - started, 15s);
    EXPECT_EQ(waiting_pulls(c, q), 0);
    // The cancelled pull claimed nothing: a job pushed now is there for the next worker.
    int64_t id = c.push(q, "{}");
    EXPECT_EQ(c.job_status(id).state, JobState::Available);
}

// A worker whose server cannot wait (as `prepare` arranges) says so once in its log and LISTENs
// instead: the push's NOTIFY starts the job long before the 20 s poll, and it does not go back to
// waiting (which would fail again, or spin).
void expect_fallback_to_listening(
    const std::function<void(Client&, const std::string&, WorkerOptions&)>& prepare,
    const std::string& logged) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    c.queue_create(q);
    WorkerOptions o = slow_polling(q);
    prepare(c, q, o);
    std::atomic<int> fallbacks{0};
    o.log = [&](const std::string& line) {
        if (line.find(logged) != std::string::npos) ++fallbacks;
    };
    Worker w(o);
    w.on_any([](JobContext&) {});
    Running r(w);
    ASSERT_TRUE(eventually([&] { return fallbacks.load() == 1; }, 10s));
    int64_t id = c.push(q, "{}");
    EXPECT_TRUE(eventually([&] { return state_is(c, id, JobState::Completed); }, 5s));
    std::this_thread::sleep_for(500ms);
    EXPECT_EQ(fallbacks.load(), 1);
    EXPECT_EQ(waiting_pulls(c, q), 0);
}

TEST(Worker, AQueueWithRateLimitsFallsBackToListening) {
    // queue_pull returns at once on a queue with rate limits.
    expect_fallback_to_listening(
        [](Client& c, const std::string& q, WorkerOptions&) {
            c.exec("SELECT hopper.queue_set_rate_limit($1, 1000, '1 second')", q);
        },
        "does not wait in queue_pull");
}

TEST(Worker, AStatementTimeoutFallsBackToListening) {
    expect_fallback_to_listening(
        [](Client&, const std::string&, WorkerOptions& o) {
            o.conninfo += " options='-c statement_timeout=300'";
        },
        "waiting pull on queue");
}

// An operator's pg_cancel_backend of the waiting pull fails with the SQLSTATE of a
// statement_timeout, but says nothing about whether the role can wait: the worker waits in the
// server again after its back-off, rather than listen and poll for good.
TEST(Worker, ACancelledWaitingPullWaitsAgain) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    c.queue_create(q);
    WorkerOptions o = slow_polling(q);
    std::atomic<int> listening{0};
    o.log = [&](const std::string& line) {
        if (line.find("listening") != std::string::npos) ++listening;
    };
    Worker w(o);
    w.on_any([](JobContext&) {});
    Running r(w);
    ASSERT_TRUE(eventually([&] { return waiting_pulls(c, q) == 1; }, 30s));
    // A new waiting pull on the same connection.
    ASSERT_TRUE(test::waits_again_after_cancel(c, q, "queue_pull"));
    EXPECT_EQ(listening.load(), 0);
    int64_t id = c.push(q, "{}");
    EXPECT_TRUE(eventually([&] { return state_is(c, id, JobState::Completed); }, 5s));
}

TEST(Worker, UnknownKindIsFailedWithAClearError) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    Worker w(options(q));
    w.on("known", [](JobContext&) {});
    Running r(w);
    PushOptions o;
    o.kind = "mystery";
    o.max_attempts = 1;
    int64_t id = c.push(q, "{}", o);
    ASSERT_TRUE(eventually([&] { return state_is(c, id, JobState::Dead); }, 60s));
    auto err = c.job_status(id).last_error.value_or("");
    EXPECT_NE(err.find("no handler for kind \"mystery\""), std::string::npos) << err;
    EXPECT_NE(err.find("known"), std::string::npos) << err;
}

// A log function that throws must not take the process down: the failure it was told of is
// logged from a handler thread, where an escaping exception calls std::terminate.
TEST(Worker, ALogFunctionThatThrowsDoesNotEndTheWorker) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    WorkerOptions o = options(q);
    std::atomic<int> told{0};
    o.log = [&](const std::string&) {
        ++told;
        throw std::runtime_error("log sink is full");
    };
    Worker w(o);
    w.on("bad", [](JobContext&) { throw PermanentFailure("bad input"); });
    w.on("good", [](JobContext&) {});
    Running r(w);
    PushOptions bad, good;
    bad.kind = "bad";
    good.kind = "good";
    int64_t a = c.push(q, "{}", bad);
    ASSERT_TRUE(eventually([&] { return state_is(c, a, JobState::Dead); }, 60s));
    int64_t b = c.push(q, "{}", good);
    ASSERT_TRUE(eventually([&] { return state_is(c, b, JobState::Completed); }, 60s));
    r.stop();
    EXPECT_GE(told.load(), 1);
    EXPECT_EQ(w.stats().failed, 1u);
    EXPECT_EQ(w.stats().completed, 1u);
}

TEST(Worker, OnAnyHandlesJobsWithoutTheirOwnHandler) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    Worker w(options(q));
    std::mutex m;
    std::set<std::string> seen;
    w.on_any([&](JobContext& job) {
        std::lock_guard<std::mutex> lock(m);
        seen.insert(job.kind().value_or("(none)"));
    });
    Running r(w);
    PushOptions o;
    o.kind = "anything";
    int64_t a = c.push(q, "{}", o);
    int64_t b = c.push(q, "{}");
    ASSERT_TRUE(eventually(
        [&] { return state_is(c, a, JobState::Completed) && state_is(c, b, JobState::Completed); },
        60s));
    std::lock_guard<std::mutex> lock(m);
    EXPECT_EQ(seen, (std::set<std::string>{"anything", "(none)"}));
}

TEST(Worker, HandlerFailuresRetryOrBury) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    Worker w(options(q));
    w.on("later", [](JobContext&) { throw RetryIn(1h, "upstream busy"); });
    w.on("never", [](JobContext&) { throw PermanentFailure("file is not a video"); });
    w.on("oops", [](JobContext&) { throw std::runtime_error("disk full"); });
    Running r(w);
    PushOptions later, never, oops;
    later.kind = "later";
    never.kind = "never";
    oops.kind = "oops";
    oops.max_attempts = 2;
    int64_t a = c.push(q, "{}", later);
    int64_t b = c.push(q, "{}", never);
    int64_t d = c.push(q, "{}", oops);
    ASSERT_TRUE(eventually([&] { return state_is(c, a, JobState::Scheduled); }, 60s));
    JobInfo ja = c.job_status(a);
    EXPECT_EQ(ja.last_error, "upstream busy");
    EXPECT_GT(ja.run_at, Clock::now() + 50min);
    ASSERT_TRUE(eventually([&] { return state_is(c, b, JobState::Dead); }, 60s));
    EXPECT_EQ(c.job_status(b).attempt, 1) << "a permanent failure is not retried";
    EXPECT_EQ(c.job_status(b).last_error, "file is not a video");
    // An ordinary exception is retried with the queue's backoff (1 s base here), then buried.
    ASSERT_TRUE(eventually([&] { return state_is(c, d, JobState::Dead); }, 60s));
    EXPECT_EQ(c.job_status(d).attempt, 2);
    EXPECT_EQ(c.job_status(d).last_error, "disk full");
}

// A ConnectionError from a connection of the handler's own is an ordinary failure of its job:
// the attempt counts, with the error's text, while job.client() stays fine.
TEST(Worker, AConnectionErrorFromTheHandlersOwnConnectionFailsItsJob) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    QueueOptions qo;
    qo.max_attempts = 1;
    c.queue_create(q, qo);
    Worker w(options(q, 1));
    w.on("elsewhere", [](JobContext&) { Client other("host=/nonexistent port=1"); });
    w.on("good", [](JobContext&) {});
    Running r(w);
    PushOptions elsewhere, good;
    elsewhere.kind = "elsewhere";
    good.kind = "good";
    int64_t bad = c.push(q, "{}", elsewhere);
    int64_t fine = c.push(q, "{}", good);
    ASSERT_TRUE(eventually([&] { return state_is(c, bad, JobState::Dead); }, 60s));
    ASSERT_TRUE(eventually([&] { return state_is(c, fine, JobState::Completed); }, 60s));
    JobInfo info = c.job_status(bad);
    EXPECT_EQ(info.attempt, 1);
    ASSERT_TRUE(info.last_error.has_value());
    EXPECT_NE(info.last_error->find("could not connect"), std::string::npos) << *info.last_error;
    r.stop();
    EXPECT_EQ(w.stats().failed, 1u);
    EXPECT_EQ(w.stats().completed, 1u);
}

// A handler that fails inside a transaction it began, or returns with one open, must not leave
// its thread's connection in it: the job's failure is still reported, and the next job on the
// same thread runs and completes (before: every report failed with 25P02 and the jobs stayed
// running until their leases ran out).
TEST(Worker, HandlerLeavingATransactionOpenDoesNotBreakItsThread) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    WorkerOptions o = options(q, 1);
    o.batch_completions = false;
    o.prefetch = 0;
    Worker w(o);
    w.on("aborts", [](JobContext& job) {
        job.client().exec("BEGIN");
        job.client().exec("SELECT 1/0");
    });
    w.on("open", [](JobContext& job) { job.client().exec("BEGIN"); });
    w.on("fine", [](JobContext&) {});
    PushOptions aborts, open, fine;
    aborts.kind = "aborts";
    open.kind = "open";
    fine.kind = "fine";
    aborts.max_attempts = open.max_attempts = 1;
    int64_t a = c.push(q, "{}", aborts);
    int64_t b = c.push(q, "{}", open);
    int64_t d = c.push(q, "{}", fine);
    Running r(w);
    ASSERT_TRUE(eventually([&] { return state_is(c, d, JobState::Completed); }, 60s))
        << "the job after them is " << to_string(c.job_status(d).state);
    EXPECT_EQ(c.job_status(a).state, JobState::Dead);
    EXPECT_NE(c.job_status(a).last_error.value_or("").find("division by zero"), std::string::npos);
    EXPECT_EQ(c.job_status(b).state, JobState::Dead) << "its writes were rolled back: not done";
    EXPECT_NE(c.job_status(b).last_error.value_or("").find("transaction open"), std::string::npos);
}

TEST(Worker, HandlerCompletesInItsOwnTransaction) {
    Client c(conninfo());
    c.exec("CREATE TABLE IF NOT EXISTS uploads (id bigint PRIMARY KEY, status text NOT NULL)");
    std::string q = unique_queue("w");
    Worker w(options(q));
    std::atomic<bool> completed_by_handler{false};
    w.on_any([&](JobContext& job) {
        completed_by_handler = job.complete_with(
            [&](Client& h) { h.exec("INSERT INTO uploads VALUES ($1, 'processed')", job.id()); },
            std::string(R"({"done": true})"));
    });
    Running r(w);
    int64_t id = c.push(q, "{}");
    ASSERT_TRUE(eventually([&] { return state_is(c, id, JobState::Completed); }, 60s));
    EXPECT_TRUE(completed_by_handler.load());
    EXPECT_EQ(c.exec("SELECT status FROM uploads WHERE id = $1", id).text(0, 0), "processed");
    EXPECT_EQ(c.job_status(id).result, R"({"done": true})");
    r.stop();
    EXPECT_EQ(w.stats().completed, 1u);
    EXPECT_EQ(w.stats().lost, 0u) << "the runtime must not try to complete it a second time";
}

// A worker binds its leases to the pulling server session, so that the reaper rescues the jobs
// of a process that dies at once, but not behind a connection pooler (PgBouncer; here
// HOPPER_POOLER=on stands for it): the pooler may close that session while the job runs on (the
// reaper then handed it to a second worker), and keeps it open when the process dies. It says
// so, once. WorkerOptions::session_bound decides for it.
TEST(Worker, BindsLeasesToItsServerSessionUnlessPooled) {
    Client c(conninfo());
    auto bound = [&](std::optional<bool> session_bound, const char* pooler) {
        std::optional<test::PoolerSetting> setting;
        if (pooler) setting.emplace(pooler);
        std::string q = unique_queue("bound");
        WorkerOptions o = options(q, 1);
        o.session_bound = session_bound;
        std::mutex m;
        std::vector<std::string> lines;
        o.log = [&](const std::string& line) {
            std::lock_guard<std::mutex> lock(m);
            lines.push_back(line);
        };
        Worker w(o);
        std::atomic<int> seen{-1};
        w.on_any([&](JobContext& job) {
            seen = job.client()
                       .exec("SELECT session_bound::int FROM hopper.jobs WHERE id = $1", job.id())
                       .int64(0, 0);
        });
        Running r(w);
        int64_t a = c.push(q, "{}");
        EXPECT_TRUE(eventually([&] { return state_is(c, a, JobState::Completed); }, 60s));
        int64_t b = c.push(q, "{}");
        EXPECT_TRUE(eventually([&] { return state_is(c, b, JobState::Completed); }, 60s));
        r.stop();
        std::lock_guard<std::mutex> lock(m);
        return std::make_pair(seen.load(),
                              std::count_if(lines.begin(), lines.end(), [](const std::string& l) {
                                  return l.find("connection pooler") != std::string::npos;
                              }));
    };
    EXPECT_EQ(bound(std::nullopt, nullptr), std::make_pair(1, 0L));
    EXPECT_EQ(bound(std::nullopt, "on"), std::make_pair(0, 1L));
    EXPECT_EQ(bound(false, nullptr), std::make_pair(0, 0L));
    EXPECT_EQ(bound(true, "on"), std::make_pair(1, 0L));
}

TEST(Worker, HandlerCanReleaseItsJob) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    Worker w(options(q));
    std::atomic<int> calls{0};
    w.on_any([&](JobContext& job) {
        // The first time, give it back; the second time, do it.
        if (++calls == 1) {
            EXPECT_TRUE(job.release());
        }
    });
    Running r(w);
    int64_t id = c.push(q, "{}");
    ASSERT_TRUE(eventually([&] { return state_is(c, id, JobState::Completed); }, 60s));
    EXPECT_EQ(calls.load(), 2);
    EXPECT_EQ(c.job_status(id).attempt, 1) << "the release did not use up an attempt";
    r.stop();
    EXPECT_EQ(w.stats().released, 1u);
    EXPECT_EQ(w.stats().completed, 1u);
    EXPECT_EQ(w.stats().lost, 0u);
}

TEST(Worker, ProgressIsVisibleWhileTheHandlerRuns) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    Worker w(options(q));
    std::atomic<bool> release{false};
    std::atomic<bool> reported{false};
    w.on_any([&](JobContext& job) {
        reported = job.progress(0.5, std::string(R"({"frame": 120})"));
        while (!release && !job.stop_requested()) std::this_thread::sleep_for(10ms);
    });
    Running r(w);
    int64_t id = c.push(q, "{}");
    ASSERT_TRUE(eventually([&] { return c.job_status(id).progress.has_value(); }, 60s));
    JobInfo s = c.job_status(id);
    EXPECT_EQ(s.state, JobState::Running);
    EXPECT_DOUBLE_EQ(*s.progress, 0.5);
    EXPECT_EQ(s.progress_detail, R"({"frame": 120})");
    EXPECT_TRUE(reported.load());
    release = true;
    EXPECT_TRUE(eventually([&] { return state_is(c, id, JobState::Completed); }, 60s));
}

TEST(Worker, HeartbeatsKeepALongJobPastItsLease) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    QueueOptions qo;
    qo.lease = 3s;  // heartbeats every second: two may run late before the lease is at risk
    c.queue_create(q, qo);
    Worker w(options(q));
    std::atomic<bool> stopped{false};
    std::atomic<bool> started{false};
    w.on_any([&](JobContext& job) {
        started = true;
        // Three leases long: only heartbeats keep the job ours.
        stopped = job.wait_for_stop(9s);
    });
    Running r(w);
    int64_t id = c.push(q, "{}");
    ASSERT_TRUE(eventually([&] { return started.load(); }, 60s));
    // Meanwhile nobody else can take the job over.
    Client thief(conninfo());
    auto until = std::chrono::steady_clock::now() + 7s;
    while (std::chrono::steady_clock::now() < until) {
        EXPECT_TRUE(thief.pull(q).empty()) << "the job was taken over while its worker held it";
        std::this_thread::sleep_for(250ms);
    }
    ASSERT_TRUE(eventually([&] { return state_is(c, id, JobState::Completed); }, 60s));
    EXPECT_FALSE(stopped.load());
    EXPECT_EQ(c.job_status(id).attempt, 1);
}

// A running job keeps the lease it was pulled with when its queue's lease is shortened meanwhile:
// each heartbeat extends it by that lease, a third of which is the heartbeat's interval. (Beaten
// every second and extended by the queue's new half second, its lease ran out between heartbeats,
// and another worker took the job while its handler still ran.)
TEST(Worker, ShorteningTheQueuesLeaseDoesNotCostARunningJobItsLease) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    QueueOptions qo;
    qo.lease = 3s;  // heartbeats every second
    c.queue_create(q, qo);
    Worker w(options(q, 1));
    std::atomic<int> runs{0};
    std::atomic<bool> started{false}, stopped{false};
    w.on_any([&](JobContext& job) {
        ++runs;
        started = true;
        // Not while a run of it lost is still held: the test ends at the first.
        if (job.attempt() > 1) return;
        stopped = job.wait_for_stop(5s);
    });
    Running r(w);
    int64_t id = c.push(q, "{}");
    ASSERT_TRUE(eventually([&] { return started.load(); }, 60s));
    QueueOptions shorter;
    shorter.lease = 500ms;
    c.queue_create(q, shorter);
    // Past the job's first lease, nobody else can take the job over.
    Client thief(conninfo());
    bool taken = false;
    auto until = std::chrono::steady_clock::now() + 5s;
    while (!taken && std::chrono::steady_clock::now() < until) {
        taken = !thief.pull(q).empty();
        std::this_thread::sleep_for(100ms);
    }
    ASSERT_FALSE(taken) << "the job was taken over while its handler ran";
    ASSERT_TRUE(eventually([&] { return state_is(c, id, JobState::Completed); }, 60s));
    EXPECT_FALSE(stopped.load());
    EXPECT_EQ(c.job_status(id).attempt, 1);
    r.stop();
    EXPECT_EQ(runs.load(), 1);
    EXPECT_EQ(w.stats().lost, 0u);
}

// A heartbeat that fails (its connection ended) is tried again after the back-off, not a whole
// interval later: with the lease a few intervals long, a short outage would otherwise cost it.
TEST(Worker, AFailedHeartbeatIsRetriedAfterTheBackOff) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    QueueOptions qo;
    qo.lease = 24s;  // heartbeats every 8 s
    c.queue_create(q, qo);
    WorkerOptions o = options(q, 1);
    o.conninfo = test::named_conninfo(q);
    o.min_backoff = 1s;  // the first retry waits exactly this long
    o.max_backoff = 1s;
    std::mutex m;
    std::optional<std::chrono::steady_clock::time_point> failed_at;
    o.log = [&](const std::string& line) {
        std::lock_guard<std::mutex> lock(m);
        if (!failed_at && line.find("heartbeat failed") != std::string::npos)
            failed_at = std::chrono::steady_clock::now();
    };
    Worker w(o);
    std::atomic<bool> started{false}, done{false};
    w.on_any([&](JobContext& job) {
        job.progress(0.5);  // opens the heartbeat's connection, for the test to end
        started = true;
        while (!done && !job.wait_for_stop(50ms)) {
        }
    });
    Running r(w);
    int64_t id = c.push(q, "{}");
    ASSERT_TRUE(eventually([&] { return started.load(); }, 60s));
    auto lease_until = [&] {
        return c
            .exec(
                "SELECT extract(epoch FROM lease_until)::float8 FROM hopper.jobs "
                "WHERE id = $1",
                id)
            .float8(0, 0);
    };
    const double before = lease_until();
    ASSERT_EQ(c.exec("SELECT count(pg_catalog.pg_terminate_backend(pid)) FROM "
                     "pg_catalog.pg_stat_activity WHERE application_name = $1 AND query LIKE "
                     "'%queue_progress%'",
                     q)
                  .int64(0, 0),
              1);
    auto failed = [&] {
        std::lock_guard<std::mutex> lock(m);
        return failed_at;
    };
    ASSERT_TRUE(eventually([&] { return failed().has_value(); }, 30s));
    ASSERT_TRUE(eventually([&] { return lease_until() > before; }, 30s));
    auto retried_after_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                std::chrono::steady_clock::now() - *failed())
                                .count();
    EXPECT_LT(retried_after_ms, 5000);  // 1 s of back-off, not the 8 s interval
    done = true;
    ASSERT_TRUE(eventually([&] { return state_is(c, id, JobState::Completed); }, 60s));
    EXPECT_EQ(c.job_status(id).attempt, 1);
}

TEST(Worker, CancelStopsTheHandler) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    QueueOptions qo;
    qo.lease = 3s;  // heartbeats every second
    c.queue_create(q, qo);
    Worker w(options(q));
    std::atomic<bool> started{false};
    std::atomic<int> reason{-1};
    std::atomic<int> callback_reason{-1};
    w.on_any([&](JobContext& job) {
        job.on_stop([&](StopReason r) { callback_reason = static_cast<int>(r); });
        started = true;
        job.wait_for_stop(120s);
        reason = static_cast<int>(job.stop_reason());
    });
    Running r(w);
    int64_t id = c.push(q, "{}");
    ASSERT_TRUE(eventually([&] { return started.load(); }, 60s));
    ASSERT_TRUE(c.cancel(id));
    ASSERT_TRUE(eventually([&] { return reason.load() != -1; }, 60s));
    EXPECT_EQ(reason.load(), static_cast<int>(StopReason::Cancelled));
    // The callback runs on a thread of its own, just after the flag is raised.
    EXPECT_TRUE(eventually(
        [&] { return callback_reason.load() == static_cast<int>(StopReason::Cancelled); }, 10s));
    EXPECT_EQ(c.job_status(id).state, JobState::Cancelled)
        << "the handler's return changed nothing";
}

// A job cancelled while its handler runs, the handler returning before the next heartbeat tells
// it: the completion is refused, and the log says the job was cancelled, not that its lease was
// lost (which points at a stalled or cut-off worker). Both ways a completion is reported.
// An on_stop callback is the user's code: it may run long (waiting for a child process to exit)
// or wait for something the worker must do. It ran on the heartbeat thread, holding the lock every
// pull, start and end of a job takes: while it ran, no job was handed out, started or finished,
// and no lease was extended, so a long one lost every other running job.
TEST(Worker, AnOnStopCallbackThatRunsLongHoldsUpNoOtherJob) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    QueueOptions qo;
    qo.lease = 3s;  // heartbeats every second
    c.queue_create(q, qo);
    WorkerOptions o = options(q, 3);
    o.prefetch = 0;
    Worker w(o);
    std::mutex mu;
    std::condition_variable cv;
    bool callback_entered = false, callback_may_end = false, long_may_end = false;
    auto wait_for = [&](bool& flag) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait_for(lock, 30s, [&] { return flag; });
    };
    auto set = [&](bool& flag) {
        {
            std::lock_guard<std::mutex> lock(mu);
            flag = true;
        }
        cv.notify_all();
    };
    std::atomic<bool> started_stuck{false}, started_long{false}, long_stopped{false};
    w.on("stuck", [&](JobContext& job) {
        job.on_stop([&](StopReason) {
            set(callback_entered);
            wait_for(callback_may_end);
        });
        started_stuck = true;
        job.wait_for_stop(60s);
    });
    w.on("long", [&](JobContext& job) {
        started_long = true;
        job.on_stop([&](StopReason) { long_stopped = true; });
        wait_for(long_may_end);
    });
    w.on_any([](JobContext&) {});
    Running r(w);
    PushOptions stuck, long_one;
    stuck.kind = "stuck";
    long_one.kind = "long";
    int64_t a = c.push(q, "{}", stuck);
    int64_t l = c.push(q, "{}", long_one);
    ASSERT_TRUE(eventually([&] { return started_stuck.load() && started_long.load(); }, 10s));
    ASSERT_TRUE(c.cancel(a));
    ASSERT_TRUE(eventually(
        [&] {
            std::lock_guard<std::mutex> lock(mu);
            return callback_entered;
        },
        10s));
    auto entered = std::chrono::steady_clock::now();
    // While the callback runs, a new job is pulled, run and completed.
    int64_t quick = c.push(q, "{}");
    EXPECT_TRUE(eventually([&] { return state_is(c, quick, JobState::Completed); }, 5s))
        << "the callback held up the next job";
    // And the running job's lease is still extended: 3 s would have run out by now.
    std::this_thread::sleep_for(entered + 4500ms - std::chrono::steady_clock::now());
    EXPECT_TRUE(
        c.exec("SELECT lease_until > now() FROM hopper.jobs WHERE id = $1", l).boolean(0, 0))
        << "the running job's heartbeats stopped";
    EXPECT_FALSE(long_stopped.load());
    set(callback_may_end);
    set(long_may_end);
    EXPECT_TRUE(eventually([&] { return state_is(c, l, JobState::Completed); }, 10s));
    EXPECT_EQ(c.job_status(a).state, JobState::Cancelled);
}

// A callback that throws is logged; thrown on the heartbeat thread, it ended the process.
TEST(Worker, AnOnStopCallbackThatThrowsIsLogged) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    QueueOptions qo;
    qo.lease = 3s;  // heartbeats every second
    c.queue_create(q, qo);
    WorkerOptions o = options(q);
    std::atomic<int> logged{0};
    o.log = [&](const std::string& line) {
        if (line.find("on_stop callback of job") != std::string::npos &&
            line.find("threw: no child to kill") != std::string::npos)
            ++logged;
    };
    Worker w(o);
    std::atomic<bool> started{false};
    w.on("throwing", [&](JobContext& job) {
        job.on_stop([](StopReason) { throw std::runtime_error("no child to kill"); });
        started = true;
        job.wait_for_stop(60s);
    });
    w.on_any([](JobContext&) {});
    Running r(w);
    PushOptions throwing;
    throwing.kind = "throwing";
    int64_t id = c.push(q, "{}", throwing);
    ASSERT_TRUE(eventually([&] { return started.load(); }, 10s));
    ASSERT_TRUE(c.cancel(id));
    EXPECT_TRUE(eventually([&] { return logged.load() == 1; }, 10s));
    int64_t next = c.push(q, "{}");
    EXPECT_TRUE(eventually([&] { return state_is(c, next, JobState::Completed); }, 10s));
}

TEST(Worker, AJobCancelledWhileItsHandlerRanIsLoggedAsCancelled) {
    for (bool batched : {true, false}) {
        SCOPED_TRACE(batched ? "batched completions" : "completions one by one");
        Client c(conninfo());
        std::string q = unique_queue("w");
        c.queue_create(q);  // a 30 s lease: the next heartbeat is 10 s away
        WorkerOptions o = options(q, 1);
        o.batch_completions = batched;
        std::mutex mu;
        std::vector<std::string> lines;
        o.log = [&](const std::string& line) {
            std::lock_guard<std::mutex> lock(mu);
            lines.push_back(line);
        };
        auto logged = [&](const std::string& text) {
            std::lock_guard<std::mutex> lock(mu);
            return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) {
                return l.find(text) != std::string::npos;
            });
        };
        Worker w(o);
        std::atomic<bool> started{false}, go{false};
        w.on_any([&](JobContext&) {
            started = true;
            eventually([&] { return go.load(); }, 30s);
        });
        Running r(w);
        int64_t id = c.push(q, "{}");
        ASSERT_TRUE(eventually([&] { return started.load(); }, 10s));
        ASSERT_TRUE(c.cancel(id));
        go = true;
        std::string cancelled =
            fmt::format("job {} finished by its handler but no longer ours (cancelled)", id);
        EXPECT_TRUE(eventually([&] { return logged(cancelled); }, 10s));
        EXPECT_FALSE(logged("lease lost"));
        r.stop();
        EXPECT_EQ(c.job_status(id).state, JobState::Cancelled);
    }
}

// A running job deleted under its worker (its row gone, as a drop or a pruned history leaves it):
// its heartbeat answers "does not exist", which stops its handler as a lost lease does. Taken for a
// connection error, it stopped the heartbeats of the jobs after it too, whose leases ran out.
TEST(Worker, AJobDeletedUnderItsWorkerIsLostAndTheOthersStillBeat) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    QueueOptions qo;
    qo.lease = 3s;  // heartbeats every second
    c.queue_create(q, qo);
    WorkerOptions o = options(q, 2);
    o.shutdown_timeout = 1s;  // the surviving handler waits for a stop to the end
    Worker w(o);
    std::atomic<int> started{0};
    std::atomic<int> lost{0};
    w.on_any([&](JobContext& job) {
        ++started;
        job.wait_for_stop(120s);
        if (job.stop_reason() == StopReason::Lost) ++lost;
    });
    int64_t gone = c.push(q, "{}");
    int64_t kept = c.push(q, "{}");
    Running r(w);
    ASSERT_TRUE(eventually([&] { return started.load() == 2; }, 60s));
    c.exec("DELETE FROM hopper.jobs WHERE id = $1", gone);
    ASSERT_TRUE(eventually([&] { return lost.load() == 1; }, 30s))
        << "the deleted job's handler was not stopped";
    // The other job's lease keeps being renewed: 3 s would have run out by now.
    std::this_thread::sleep_for(5s);
    EXPECT_EQ(c.job_status(kept).state, JobState::Running);
    EXPECT_TRUE(c.exec("SELECT lease_until > now() + interval '1 second' FROM hopper.jobs "
                       "WHERE id = $1",
                       kept)
                    .boolean(0, 0))
        << "the surviving job's heartbeats stopped";
}

// The worker's pulling connection dies while a handler runs: the reaper rescues the job, and the
// same worker pulls it again on its other thread. The first run is stopped as lost, the second
// completes the job. (Known by id alone, the second run's hold took the first one's place: the
// first was never stopped and then unregistered the second, whose lease ran out, and the job went
// dead after five attempts that all succeeded.)
TEST(Worker, AJobPulledAgainByTheSameWorkerIsAnotherRun) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    QueueOptions qo;
    qo.lease = 3s;
    qo.backoff_base = 100ms;
    qo.jitter = 0.0;
    c.queue_create(q, qo);
    WorkerOptions o = options(q, 2);
    o.prefetch = 0;
    Worker w(o);
    std::mutex m;
    std::map<int, StopReason> stopped;  // attempt -> why its run was told to stop
    w.on_any([&](JobContext& job) {
        if (job.attempt() == 1) job.wait_for_stop(20s);
        std::lock_guard<std::mutex> lock(m);
        stopped[job.attempt()] = job.stop_reason();
    });
    int64_t id = c.push(q, "{}");
    Running r(w);
    ASSERT_TRUE(eventually([&] { return state_is(c, id, JobState::Running); }, 60s));
    c.exec("SELECT pg_catalog.pg_terminate_backend(claimed_pid) FROM hopper.jobs WHERE id = $1",
           id);
    ASSERT_TRUE(eventually([&] { return state_is(c, id, JobState::Completed); }, 30s));
    ASSERT_TRUE(eventually(
        [&] {
            std::lock_guard<std::mutex> lock(m);
            return stopped.count(1) > 0;
        },
        15s))
        << "the first run was never told to stop";
    std::lock_guard<std::mutex> lock(m);
    EXPECT_EQ(stopped[1], StopReason::Lost);
    EXPECT_EQ(stopped[2], StopReason::None);
    EXPECT_EQ(c.job_status(id).attempt, 2);
}

// One handler holds its job's row in a slow fail_with: the heartbeat of that job waits, but the
// other jobs' heartbeats go on. (One thread beats for every job; waiting for the row, it let a
// 3 s lease run out and the other job ran twice.)
TEST(Worker, AHandlerHoldingItsRowDoesNotHoldUpTheOthersHeartbeats) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    QueueOptions qo;
    qo.lease = 3s;
    qo.max_attempts = 1;
    c.queue_create(q, qo);
    WorkerOptions o = options(q, 2);
    o.prefetch = 0;
    Worker w(o);
    w.on("slow-fail", [](JobContext& job) {
        job.fail_with("gave up", {}, [](Client&, JobState) { std::this_thread::sleep_for(6s); });
    });
    w.on("long", [](JobContext&) { std::this_thread::sleep_for(7s); });
    PushOptions slow, lng;
    slow.kind = "slow-fail";
    lng.kind = "long";
    int64_t a = c.push(q, "{}", slow);
    int64_t b = c.push(q, "{}", lng);
    Running r(w);
    ASSERT_TRUE(eventually([&] { return state_is(c, b, JobState::Completed); }, 60s));
    EXPECT_EQ(c.job_status(b).attempt, 1);
    EXPECT_EQ(c.job_status(a).state, JobState::Dead);
    r.stop();
    EXPECT_EQ(w.stats().lost, 0u);
}

// A handler that reports progress from inside its own fail_with, whose transaction holds the
// job's row: the report cannot be recorded, and is dropped (and logged) after a short wait rather
// than waited for. Waiting, it held up the control connection, which beats for every job: the
// other job's lease ran out, the worker's next pull took it over and it ran twice at once, and
// the reporting handler never returned.
TEST(Worker, ProgressInsideTheHandlersOwnTransactionHoldsUpNoHeartbeat) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    QueueOptions qo;
    qo.lease = 6s;  // the first heartbeat 2 s after the pull: the report comes before it
    c.queue_create(q, qo);
    WorkerOptions o = options(q, 3);
    o.prefetch = 0;
    o.shutdown_timeout = 1s;
    std::mutex m;
    std::vector<std::string> lines;
    o.log = [&](const std::string& line) {
        std::lock_guard<std::mutex> lock(m);
        lines.push_back(line);
    };
    Worker w(o);
    std::atomic<bool> returned{false};
    std::vector<int> long_runs;  // the attempt of each run of the long job, under m
    w.on("report-in-fail", [&](JobContext& job) {
        FailOptions fo;
        fo.permanent = true;
        job.fail_with("bad input", fo, [&](Client&, JobState) { job.progress(1.0); });
        returned = true;
    });
    w.on("long", [&](JobContext& job) {
        {
            std::lock_guard<std::mutex> lock(m);
            long_runs.push_back(job.attempt());
        }
        job.wait_for_stop(12s);  // two leases: only heartbeats keep the job ours
    });
    PushOptions report, lng;
    report.kind = "report-in-fail";
    lng.kind = "long";
    int64_t a = c.push(q, "{}", report);
    int64_t b = c.push(q, "{}", lng);
    Running r(w);
    bool settled = eventually(
        [&] {
            {
                std::lock_guard<std::mutex> lock(m);
                if (long_runs.size() > 1) return true;
            }
            return state_is(c, b, JobState::Completed);
        },
        60s);
    bool a_returned = eventually([&] { return returned.load(); }, 10s);
    // A report still waiting for the row is let go, as an operator would, so the worker can stop.
    c.exec(
        "SELECT pg_catalog.pg_cancel_backend(pid) FROM pg_catalog.pg_stat_activity "
        "WHERE datname = pg_catalog.current_database() AND wait_event_type = 'Lock' "
        "AND pid <> pg_catalog.pg_backend_pid()");
    ASSERT_TRUE(settled);
    EXPECT_TRUE(a_returned) << "the handler reporting progress in its own transaction hung";
    {
        std::lock_guard<std::mutex> lock(m);
        EXPECT_EQ(long_runs, std::vector<int>{1}) << "the long job was taken over";
    }
    EXPECT_EQ(c.job_status(b).state, JobState::Completed);
    EXPECT_EQ(c.job_status(b).attempt, 1);
    EXPECT_EQ(c.job_status(a).state, JobState::Dead);
    r.stop();
    EXPECT_EQ(w.stats().lost, 0u);
    std::lock_guard<std::mutex> lock(m);
    const std::string dropped = fmt::format("progress of job {} not recorded", a);
    EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [&](const std::string& l) {
        return l.find(dropped) != std::string::npos;
    })) << "the report that could not be made was not logged";
}

TEST(Worker, LostLeaseStopsTheHandler) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    QueueOptions qo;
    qo.lease = 3s;
    c.queue_create(q, qo);
    Worker w(options(q));
    std::atomic<bool> started{false};
    std::atomic<int> reason{-1};
    w.on_any([&](JobContext& job) {
        started = true;
        job.wait_for_stop(120s);
        reason = static_cast<int>(job.stop_reason());
    });
    Running r(w);
    int64_t id = c.push(q, "{}");
    ASSERT_TRUE(eventually([&] { return started.load(); }, 60s));
    // Another worker, an hour in the future, finds the lease expired and takes the job.
    PullOptions future;
    future.at = Clock::now() + 1h;
    auto taken = c.pull(q, future);
    ASSERT_EQ(taken.size(), 1u);
    ASSERT_TRUE(eventually([&] { return reason.load() != -1; }, 60s));
    EXPECT_EQ(reason.load(), static_cast<int>(StopReason::Lost));
    // The new owner's lease is untouched by the old handler's return.
    EXPECT_TRUE(c.complete(id, taken[0].lease_token));
    r.stop();
    EXPECT_EQ(w.stats().lost, 1u);
}

TEST(Worker, ShutdownWaitsForJobsThatFinishInTime) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    WorkerOptions o = options(q);
    o.shutdown_timeout = 30s;
    Worker w(o);
    std::atomic<bool> started{false};
    w.on_any([&](JobContext&) {
        started = true;
        std::this_thread::sleep_for(800ms);
    });
    Running r(w);
    int64_t id = c.push(q, "{}");
    ASSERT_TRUE(eventually([&] { return started.load(); }, 60s));
    r.stop();
    EXPECT_EQ(c.job_status(id).state, JobState::Completed);
    EXPECT_EQ(w.stats().released, 0u);
}

TEST(Worker, ShutdownReleasesJobsPastTheDeadline) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    WorkerOptions o = options(q, 2);
    o.shutdown_timeout = 500ms;
    Worker w(o);
    std::atomic<int> started{0};
    std::atomic<int> shutdown_seen{0};
    w.on_any([&](JobContext& job) {
        ++started;
        job.wait_for_stop(120s);
        if (job.stop_reason() == StopReason::Shutdown) ++shutdown_seen;
    });
    Running r(w);
    int64_t a = c.push(q, "{}");
    int64_t b = c.push(q, "{}");
    ASSERT_TRUE(eventually([&] { return started.load() == 2; }, 60s));
    r.stop();
    EXPECT_EQ(shutdown_seen.load(), 2);
    EXPECT_EQ(w.stats().released, 2u);
    for (int64_t id : {a, b}) {
        JobInfo s = c.job_status(id);
        EXPECT_EQ(s.state, JobState::Available) << "job " << id;
        EXPECT_FALSE(s.last_error) << "a release is not a failure";
    }
}

// Ctrl-C pressed twice: the first signal begins the shutdown, which would wait shutdown_timeout
// (30 s) for the running handler; the second does now what the deadline would, raising the
// handler's stop flag with Shutdown and releasing its job without spending an attempt.
TEST(Worker, ASecondSignalHurriesTheShutdown) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    WorkerOptions o = options(q, 1);
    o.handle_signals = true;
    o.shutdown_timeout = 30s;
    std::vector<std::string> lines;
    std::mutex lines_m;
    o.log = [&](const std::string& msg) {
        std::lock_guard<std::mutex> lock(lines_m);
        lines.push_back(msg);
    };
    Worker w(o);
    std::atomic<bool> started{false}, returned{false};
    std::atomic<StopReason> reason{StopReason::None};
    w.on_any([&](JobContext& job) {
        started = true;
        job.wait_for_stop(120s);
        reason = job.stop_reason();
    });
    int64_t id = c.push(q, "{}");
    std::thread runner([&] {
        w.run();
        returned = true;
    });
    struct Join {  // a test ended early still lets run() end (after its deadline) before leaving
        std::thread& t;
        Worker& w;
        ~Join() {
            w.stop();
            if (t.joinable()) t.join();
        }
    } join{runner, w};
    ASSERT_TRUE(eventually([&] { return started.load(); }, 30s));
    ASSERT_EQ(::raise(SIGINT), 0);
    std::this_thread::sleep_for(500ms);
    EXPECT_FALSE(returned.load()) << "one signal waits for the running handler";
    EXPECT_EQ(reason.load(), StopReason::None);
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(::raise(SIGINT), 0);
    ASSERT_TRUE(eventually([&] { return returned.load(); }, 5s))
        << "a second signal still waited for the shutdown timeout";
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
    EXPECT_EQ(reason.load(), StopReason::Shutdown);
    JobInfo s = c.job_status(id);
    EXPECT_EQ(s.state, JobState::Available);
    EXPECT_EQ(s.attempt, 0) << "a release does not use up an attempt";
    EXPECT_FALSE(s.last_error);
    EXPECT_EQ(w.stats().released, 1u);
    std::lock_guard<std::mutex> lock(lines_m);
    EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [](const std::string& l) {
        return l.find("second signal during shutdown") != std::string::npos;
    }));
}

// A handler that ignores its stop flag past the shutdown deadline may still be working on its
// job: the job is not released then (another worker could run it at the same time) but kept, and
// heartbeated, until the handler returns; run() waits for that, as a thread cannot be ended from
// outside. Once the handler returns, its job is released without using up an attempt.
TEST(Worker, AHandlerThatIgnoresTheShutdownKeepsItsJobUntilItReturns) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    QueueOptions qo;
    qo.lease = 1s;  // heartbeats every 333 ms
    c.queue_create(q, qo);
    WorkerOptions o = options(q, 1);
    o.shutdown_timeout = 200ms;
    Worker w(o);
    Latch let_go;
    std::atomic<bool> started{false}, told{false}, returned{false};
    w.on_any([&](JobContext& job) {
        started = true;
        if (job.wait_for_stop(120s) && job.stop_reason() == StopReason::Shutdown) told = true;
        let_go.wait();  // still at work, whatever the flag says
        job.set_result(R"({"late": true})");
    });
    int64_t id = c.push(q, "{}");
    Running r(w);
    std::thread stopper;
    // Declared after the worker: a test ended early lets the handler go and waits for the stop.
    struct Finish {
        Latch& let_go;
        std::thread& stopper;
        ~Finish() {
            let_go.open();
            if (stopper.joinable()) stopper.join();
        }
    } finish{let_go, stopper};
    ASSERT_TRUE(eventually([&] { return started.load(); }, 30s));
    stopper = std::thread([&] {
        r.stop();
        returned = true;
    });
    ASSERT_TRUE(eventually([&] { return told.load(); }, 30s)) << "the deadline stops the handler";
    Client thief(conninfo());
    auto until = std::chrono::steady_clock::now() + 3s;
    while (std::chrono::steady_clock::now() < until) {
        EXPECT_TRUE(thief.pull(q).empty()) << "the job was given away while its handler ran";
        EXPECT_FALSE(returned.load()) << "run() returned while a handler ran";
        std::this_thread::sleep_for(100ms);
    }
    let_go.open();
    ASSERT_TRUE(eventually([&] { return returned.load(); }, 30s));
    JobInfo s = c.job_status(id);
    EXPECT_EQ(s.state, JobState::Available);
    EXPECT_EQ(s.attempt, 0) << "a release does not use up an attempt";
    EXPECT_FALSE(s.last_error);
    EXPECT_FALSE(s.result) << "a handler told to stop is not taken at its word";
    EXPECT_EQ(w.stats().released, 1u);
    EXPECT_EQ(w.stats().completed, 0u);
}

// Pull-to-finish bookkeeping of the helper process: each handled job is one row in `handled`.
void create_handled_table(Client& c) {
    c.exec(
        "CREATE TABLE IF NOT EXISTS handled (job_id bigint NOT NULL, attempt int NOT NULL, "
        "pid int NOT NULL, queue text NOT NULL)");
}

// The helper worker program in a child process; killed outright if a test ends early.
class HelperProcess {
  public:
    HelperProcess(const std::string& queue, int concurrency, const std::string& mode = "record",
                  int shutdown_timeout_ms = 30000, const std::string& to = conninfo()) {
        std::string n = std::to_string(concurrency);
        std::string t = std::to_string(shutdown_timeout_ms);
        pid_ = ::fork();
        if (pid_ == 0) {
            ::execl(HOPPER_TEST_WORKER, HOPPER_TEST_WORKER, to.c_str(), queue.c_str(), n.c_str(),
                    mode.c_str(), t.c_str(), static_cast<char*>(nullptr));
            ::_exit(127);
        }
    }
    ~HelperProcess() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
    }
    pid_t pid() const { return pid_; }
    // SIGTERM or SIGINT (a graceful shutdown) and the wait status.
    int terminate(int sig = SIGTERM) {
        int status = 0;
        ::kill(pid_, sig);
        ::waitpid(pid_, &status, 0);
        pid_ = -1;
        return status;
    }

  private:
    pid_t pid_ = -1;
};

TEST(Worker, NoJobHandledTwiceAcrossThreadsAndProcesses) {
    Client c(conninfo());
    create_handled_table(c);
    std::string q = unique_queue("many");
    constexpr int kJobs = 400;

    // A second process: the helper worker with 8 threads, stopped by SIGTERM.
    HelperProcess helper(q, 8);
    ASSERT_GT(helper.pid(), 0);

    WorkerOptions o = options(q, 8);
    o.max_batch = 8;
    Worker w(o);
    w.on_any([&](JobContext& job) {
        job.client().exec("INSERT INTO handled VALUES ($1, $2, $3, $4)", job.id(), job.attempt(),
                          static_cast<int>(::getpid()), q);
        std::this_thread::sleep_for(5ms);
    });
    Running r(w);
    // Wait until the helper is connected and listening, so both compete from the start.
    ASSERT_TRUE(eventually(
        [&] {
            return c.exec("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                          "hopper_test_worker")
                       .int64(0, 0) > 0;
        },
        60s));

    std::vector<std::string> payloads;
    for (int i = 0; i < 50; ++i) payloads.push_back(fmt::format(R"({{"i": {}}})", i));
    for (int batch = 0; batch < kJobs / 50; ++batch) c.push_batch(q, payloads);

    bool all_done = eventually([&] { return c.stats(q).at(0).completed == kJobs; }, 120s);
    r.stop();
    int status = helper.terminate();
    ASSERT_TRUE(all_done) << "completed: " << c.stats(q).at(0).completed;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "helper status " << status;

    auto r1 = c.exec("SELECT count(*), count(DISTINCT job_id) FROM handled WHERE queue = $1", q);
    EXPECT_EQ(r1.int64(0, 0), kJobs) << "some job was handled twice";
    EXPECT_EQ(r1.int64(0, 1), kJobs);
    auto r2 = c.exec("SELECT count(DISTINCT pid) FROM handled WHERE queue = $1", q);
    EXPECT_EQ(r2.int64(0, 0), 2) << "both processes should have taken part";
    auto s = c.stats(q).at(0);
    EXPECT_EQ(s.dead + s.available + s.running + s.scheduled, 0);
}

// A worker that cannot reach its server backs off for up to max_backoff (10 s) between tries; a
// SIGTERM meanwhile must end it at once, not once the back-off has run out.
TEST(Worker, SigtermEndsABackOffAtOnce) {
    HelperProcess helper("nowhere", 1, "record", 300,
                         "host=/nonexistent-hopper-socket-dir port=1 connect_timeout=1");
    ASSERT_GT(helper.pid(), 0);
    // 100 ms doubling: by now it waits 3.2 s or 6.4 s between tries.
    std::this_thread::sleep_for(4s);
    auto t0 = std::chrono::steady_clock::now();
    int status = helper.terminate(SIGTERM);
    auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "helper status " << status;
    EXPECT_LT(took, 1s) << "the worker slept through SIGTERM for "
                        << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                        << " ms";
}

TEST(Worker, SigintReleasesRunningJobsAndExitsCleanly) {
    Client c(conninfo());
    std::string q = unique_queue("sigint");
    HelperProcess helper(q, 2, "block", 300);
    ASSERT_GT(helper.pid(), 0);
    int64_t a = c.push(q, "{}");
    int64_t b = c.push(q, "{}");
    ASSERT_TRUE(eventually(
        [&] { return state_is(c, a, JobState::Running) && state_is(c, b, JobState::Running); },
        60s));
    EXPECT_NE(c.job_status(a).worker.value_or("").find(std::to_string(helper.pid())),
              std::string::npos)
        << "the default worker name is host:pid";
    int status = helper.terminate(SIGINT);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "helper status " << status;
    for (int64_t id : {a, b}) {
        JobInfo s = c.job_status(id);
        EXPECT_EQ(s.state, JobState::Available) << "job " << id << " was not given back";
        EXPECT_EQ(s.attempt, 0) << "a release does not use up an attempt";
        EXPECT_FALSE(s.last_error);
    }
}

// Destroyed while run() ran in another thread, the worker freed what run() and its threads were
// still using. It now stops and waits for run(): the handler running meanwhile has returned.
TEST(Worker, DestroyedWhileRunningWaitsForRun) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    std::atomic<bool> started{false}, handler_returned{false};
    auto w = std::make_unique<Worker>(options(q, 1));
    w->on_any([&](JobContext&) {
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

// A second run() while one is under way is the caller's mistake, said at once; the run goes on.
TEST(Worker, ASecondRunWhileOneIsUnderWayIsRefused) {
    Client c(conninfo());
    std::string q = unique_queue("w");
    std::atomic<bool> started{false};
    Worker w(options(q, 1));
    w.on_any([&](JobContext&) { started = true; });
    std::thread t([&w] { w.run(); });
    c.push(q, "{}");
    ASSERT_TRUE(eventually([&] { return started.load(); }, 10s));
    EXPECT_THROW(w.run(), std::logic_error);
    w.stop();
    t.join();
}

}  // namespace
}  // namespace hopper
