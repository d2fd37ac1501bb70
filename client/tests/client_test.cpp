// Every Client call against a real server: typed results, NULLs, and errors with their SQLSTATE.
#include <gtest/gtest.h>

#include <clocale>
#include <future>
#include <utility>

#include <thread>

#include "hopper/client.hpp"
#include "decimal_comma.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using hopper::test::conninfo;
using hopper::test::eventually;
using hopper::test::unique_queue;

namespace hopper {
namespace {

// Runs `fn`, expecting an Error with SQLSTATE `state`; returns its message.
template <typename F>
std::string expect_sqlstate(const char* state, F fn) {
    try {
        fn();
    } catch (const Error& e) {
        EXPECT_EQ(e.sqlstate(), state) << e.what();
        return e.what();
    }
    ADD_FAILURE() << "expected an error with SQLSTATE " << state;
    return {};
}

class ClientTest : public ::testing::Test {
  protected:
    Client c{conninfo()};
};

// Floating-point parameters go as the shortest text that reads back as the same value, whatever
// the process's locale: std::to_string sent 1e-9 as 0, 0.123456789 as 0.123457, and under a
// German locale 0,5, which the server refuses.
TEST_F(ClientTest, FloatParametersKeepTheirValueInAnyLocale) {
    EXPECT_TRUE(c.exec("SELECT $1::float8 = 1e-9", 1e-9).boolean(0, 0));
    EXPECT_TRUE(c.exec("SELECT $1::float8 = 0.123456789", 0.123456789).boolean(0, 0));
    EXPECT_TRUE(c.exec("SELECT $1::float4 = 0.1::float4", 0.1f).boolean(0, 0));
    test::DecimalCommaLocale german;
    if (!german.active()) GTEST_SKIP() << german.why_not();
    EXPECT_TRUE(c.exec("SELECT $1::float8 = 0.5", 0.5).boolean(0, 0));
}

// The server writes "0.5" whatever the client's locale; strtod under a decimal-comma locale read
// it as 0, so a job's progress read 0 there.
TEST_F(ClientTest, FloatResultsReadTheSameInAnyLocale) {
    std::string q = unique_queue("locale");
    int64_t id = c.push(q, "{}");
    Job j = c.pull(q).at(0);
    ASSERT_TRUE(c.progress(id, j.lease_token, 0.5));
    test::DecimalCommaLocale german;
    if (!german.active()) GTEST_SKIP() << german.why_not();
    EXPECT_EQ(c.job_status(id).progress, std::optional<double>(0.5));
    EXPECT_EQ(c.exec("SELECT 1234.25::float8").float8(0, 0), 1234.25);
    EXPECT_EQ(c.exec("SELECT '1e-310'::float8").float8(0, 0), 1e-310);
    // Only a whole number is one: "0.5abc" is not 0.5.
    EXPECT_THROW(c.exec("SELECT '0.5abc'").float8(0, 0), std::runtime_error);
    EXPECT_THROW(c.exec("SELECT ''").float8(0, 0), std::runtime_error);
}

TEST_F(ClientTest, QueueCreatePauseResumeDrop) {
    std::string q = unique_queue("q");
    QueueOptions o;
    o.max_attempts = 3;
    o.lease = 5s;
    EXPECT_TRUE(c.queue_create(q, o));
    EXPECT_FALSE(c.queue_create(q, o));
    c.queue_pause(q);
    auto s = c.stats(q);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_TRUE(s[0].paused);
    c.push(q, R"({"a": 1})");
    EXPECT_TRUE(c.pull(q).empty()) << "a paused queue hands out nothing";
    c.queue_resume(q);
    EXPECT_FALSE(c.stats(q)[0].paused);
    EXPECT_EQ(c.job_status(c.push(q, "{}")).max_attempts, 3);
    EXPECT_EQ(c.queue_purge(q), 2);
    EXPECT_TRUE(c.queue_drop(q));
    expect_sqlstate("P0002", [&] { c.stats(q); });
}

TEST_F(ClientTest, PushWithOptionsShowsInStatus) {
    std::string q = unique_queue("push");
    PushOptions o;
    o.kind = "resize";
    o.priority = -5;
    o.max_attempts = 7;
    int64_t id = c.push(q, R"({"image": "a.png"})", o);
    JobInfo j = c.job_status(id);
    EXPECT_EQ(j.id, id);
    EXPECT_EQ(j.queue, q);
    EXPECT_EQ(j.kind, "resize");
    EXPECT_EQ(j.state, JobState::Available);
    EXPECT_EQ(j.priority, -5);
    EXPECT_EQ(j.max_attempts, 7);
    EXPECT_EQ(j.attempt, 0);
    EXPECT_EQ(j.payload, R"({"image": "a.png"})");
    EXPECT_FALSE(j.started_at);
    EXPECT_FALSE(j.finished_at);
    EXPECT_FALSE(j.result);
    EXPECT_FALSE(j.progress);
    EXPECT_LT(std::chrono::abs(j.created_at - Clock::now()), 60s);
}

TEST_F(ClientTest, ScheduledJobWaitsForItsTime) {
    std::string q = unique_queue("sched");
    PushOptions o;
    o.run_at = Clock::now() + 1h;
    int64_t id = c.push(q, "{}", o);
    JobInfo j = c.job_status(id);
    EXPECT_EQ(j.state, JobState::Scheduled);
    EXPECT_LT(std::chrono::abs(j.run_at - *o.run_at), 1ms);
    EXPECT_TRUE(c.pull(q).empty());
    PullOptions later;
    later.at = Clock::now() + 2h;
    auto jobs = c.pull(q, later);
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].id, id);
}

// The server keeps times far past 2262, where the clock's nanoseconds end (a pull's `at` may lie
// there): such a time reads as the clock's last instant, not as one wrapped into the past, which
// would make a lease good until 2300 look expired since 1700.
TEST_F(ClientTest, TimesPastTheClocksRangeReadAsItsEnd) {
    std::string q = unique_queue("far");
    int64_t id = c.push(q, "{}");
    c.exec("SELECT hopper.queue_pull($1, at => '2300-01-01 00:00:00+00')", q);
    JobInfo j = c.job_status(id);
    EXPECT_EQ(j.state, JobState::Running);
    EXPECT_EQ(j.started_at, std::optional<TimePoint>(TimePoint::max()));
    EXPECT_LT(j.created_at, Clock::now() + 1min);
}

// A run_at set by hand to infinity, or to the server's last year, does not fit the int8
// microseconds the times cross the wire as: the read must not fail (which took the whole listing
// of the queue with it), and such a time reads as the clock's end, -infinity as its start.
TEST_F(ClientTest, InfiniteAndLastYearTimesReadAsTheClocksEnds) {
    std::string q = unique_queue("inf");
    int64_t inf = c.push(q, "{}");
    int64_t last = c.push(q, "{}");
    int64_t neg = c.push(q, "{}");
    c.exec("UPDATE hopper.jobs SET run_at = 'infinity' WHERE id = $1", inf);
    c.exec("UPDATE hopper.jobs SET run_at = '294276-12-31 00:00:00+00' WHERE id = $1", last);
    c.exec("UPDATE hopper.jobs SET run_at = '-infinity', started_at = 'infinity' WHERE id = $1",
           neg);
    EXPECT_EQ(c.job_status(inf).run_at, TimePoint::max());
    EXPECT_EQ(c.job_status(last).run_at, TimePoint::max());
    JobInfo n = c.job_status(neg);
    EXPECT_EQ(n.run_at, TimePoint::min());
    EXPECT_EQ(n.started_at, std::optional<TimePoint>(TimePoint::max()));
    EXPECT_FALSE(c.job_status(inf).started_at) << "NULL stays NULL, not a bound";
    auto jobs = c.jobs(q);
    ASSERT_EQ(jobs.size(), 3u);
    for (const auto& j : jobs)
        EXPECT_EQ(j.run_at, j.id == neg ? TimePoint::min() : TimePoint::max()) << j.id;
}

TEST_F(ClientTest, PriorityOrdersPulls) {
    std::string q = unique_queue("prio");
    PushOptions low, high;
    low.priority = 10;
    high.priority = -10;
    int64_t a = c.push(q, "{}", low);
    int64_t b = c.push(q, "{}", high);
    PullOptions two;
    two.n = 2;
    auto jobs = c.pull(q, two);
    ASSERT_EQ(jobs.size(), 2u);
    EXPECT_EQ(jobs[0].id, b);
    EXPECT_EQ(jobs[1].id, a);
}

TEST_F(ClientTest, DedupKeyReturnsTheUnfinishedJob) {
    std::string q = unique_queue("dedup");
    PushOptions o;
    o.dedup_key = "user-42";
    int64_t a = c.push(q, R"({"n": 1})", o);
    int64_t b = c.push(q, R"({"n": 2})", o);
    EXPECT_EQ(a, b);
    EXPECT_EQ(c.stats(q)[0].available, 1);
}

TEST_F(ClientTest, DedupWindowReturnsTheFinishedJob) {
    std::string q = unique_queue("dedupwin");
    PushOptions o;
    o.dedup_key = "order-7";
    int64_t first = c.push(q, R"({"n": 1})", o);
    EXPECT_TRUE(c.cancel(first));
    o.dedup_window = std::chrono::minutes(10);
    EXPECT_EQ(c.push(q, R"({"n": 2})", o), first) << "finished within the window";
    BatchPushOptions b;
    b.dedup_keys = {std::string("order-7"), std::string("order-8")};
    b.dedup_window = std::chrono::minutes(10);
    auto ids = c.push_batch(q, {"{}", "{}"}, b);
    ASSERT_EQ(ids.size(), 2u);
    EXPECT_EQ(ids[0], first);
    EXPECT_NE(ids[1], first);
    o.dedup_window.reset();
    EXPECT_NE(c.push(q, R"({"n": 3})", o), first) << "without a window the key is free again";
    o.dedup_window = std::chrono::seconds(0);
    expect_sqlstate("22023", [&] { c.push(q, "{}", o); });
}

TEST_F(ClientTest, PushBatchKeepsPayloadOrder) {
    std::string q = unique_queue("batch");
    BatchPushOptions o;
    o.kind = "mail";
    o.dedup_keys = {std::string("k1"), std::nullopt, std::string("k1")};
    auto ids = c.push_batch(q, {R"({"i": 0})", R"({"i": 1, "s": "a,\"b\"}"})", R"({"i": 2})"}, o);
    ASSERT_EQ(ids.size(), 3u);
    EXPECT_EQ(ids[0], ids[2]) << "the third payload repeats the first one's dedup key";
    EXPECT_NE(ids[0], ids[1]);
    EXPECT_EQ(c.job_status(ids[0]).payload, R"({"i": 0})");
    // Quotes, commas and braces inside a payload survive the array literal.
    EXPECT_EQ(c.job_status(ids[1]).payload, R"({"i": 1, "s": "a,\"b\"}"})");
    EXPECT_EQ(c.job_status(ids[1]).kind, "mail");
    o.dedup_keys = {std::string("only one")};
    expect_sqlstate("22023", [&] { c.push_batch(q, {"{}", "{}"}, o); });
}

TEST_F(ClientTest, PullCompleteLifecycle) {
    std::string q = unique_queue("life");
    PushOptions o;
    o.kind = "k";
    int64_t id = c.push(q, R"({"x": 1})", o);
    PullOptions po;
    po.worker = "test-worker";
    po.lease = 10s;
    auto jobs = c.pull(q, po);
    ASSERT_EQ(jobs.size(), 1u);
    const Job& j = jobs[0];
    EXPECT_EQ(j.id, id);
    EXPECT_EQ(j.queue, q);
    EXPECT_EQ(j.kind, "k");
    EXPECT_EQ(j.attempt, 1);
    EXPECT_EQ(j.payload, R"({"x": 1})");
    EXPECT_GT(j.lease_until, Clock::now() + 5s);
    EXPECT_LT(j.lease_until, Clock::now() + 15s);

    JobInfo running = c.job_status(id);
    EXPECT_EQ(running.state, JobState::Running);
    EXPECT_EQ(running.worker, "test-worker");
    EXPECT_TRUE(running.started_at);

    EXPECT_TRUE(c.complete(id, j.lease_token, std::string(R"({"ok": true})")));
    JobInfo done = c.job_status(id);
    EXPECT_EQ(done.state, JobState::Completed);
    EXPECT_EQ(done.result, R"({"ok": true})");
    EXPECT_TRUE(done.finished_at);
    EXPECT_FALSE(c.complete(id, j.lease_token)) << "completing twice is news, not an error";
    EXPECT_FALSE(c.heartbeat(id, j.lease_token));
    EXPECT_FALSE(c.progress(id, j.lease_token, 0.5));
    EXPECT_FALSE(c.release(id, j.lease_token));
    EXPECT_FALSE(c.fail(id, j.lease_token, "late"));
}

TEST_F(ClientTest, CompleteManyCompletesHeldJobsAndLeavesOutLostOnes) {
    std::string q = unique_queue("many");
    c.push_batch(q, {"{}", "{}", "{}"});
    PullOptions three;
    three.n = 3;
    auto jobs = c.pull(q, three);
    ASSERT_EQ(jobs.size(), 3u);
    // The second job's lease is taken over by a pull an hour ahead: its old token is stale.
    PullOptions later;
    later.at = Clock::now() + 1h;
    later.n = 3;
    auto taken = c.pull(q, later);
    ASSERT_EQ(taken.size(), 3u);
    EXPECT_TRUE(c.complete(taken[0].id, taken[0].lease_token));
    EXPECT_TRUE(c.complete(taken[2].id, taken[2].lease_token));
    std::vector<int64_t> done = c.complete_many(
        {taken[0].id, taken[1].id, taken[2].id}, {taken[0].lease_token, taken[1].lease_token, 1},
        {std::nullopt, std::string(R"({"n": 2})"), std::nullopt});
    EXPECT_EQ(done, std::vector<int64_t>{taken[1].id}) << "finished or stale ones are left out";
    EXPECT_EQ(c.job_status(taken[1].id).result, R"({"n": 2})");
    EXPECT_TRUE(c.complete_many({}, {}).empty());
    EXPECT_THROW(c.complete_many({1, 2}, {1}), std::invalid_argument);
}

TEST_F(ClientTest, CompleteManyAndPullDoesBothInOneCall) {
    std::string q = unique_queue("manypull");
    c.push_batch(q, {"{}", "{}", "{}"});
    PullOptions two;
    two.n = 2;
    two.worker = "w1";
    auto first = c.pull(q, two);
    ASSERT_EQ(first.size(), 2u);
    std::vector<int64_t> completed;
    auto next = c.complete_many_and_pull({first[0].id, first[1].id},
                                         {first[0].lease_token, first[1].lease_token}, {}, q, two,
                                         completed);
    EXPECT_EQ(completed, (std::vector<int64_t>{first[0].id, first[1].id}));
    ASSERT_EQ(next.size(), 1u) << "the third job";
    EXPECT_EQ(next[0].attempt, 1);
    EXPECT_EQ(c.job_status(next[0].id).worker, "w1");
    EXPECT_EQ(c.job_status(first[0].id).state, JobState::Completed);
    // Nothing left to pull: the completed ids still come back; a stale token completes nothing.
    auto none = c.complete_many_and_pull({next[0].id, first[0].id}, {next[0].lease_token, 1}, {}, q,
                                         two, completed);
    EXPECT_TRUE(none.empty());
    EXPECT_EQ(completed, std::vector<int64_t>{next[0].id});
    none = c.complete_many_and_pull({}, {}, {}, q, two, completed);
    EXPECT_TRUE(none.empty());
    EXPECT_TRUE(completed.empty());
}

TEST_F(ClientTest, FailRetriesThenBuries) {
    std::string q = unique_queue("fail");
    PushOptions o;
    o.max_attempts = 2;
    int64_t id = c.push(q, "{}", o);
    auto j1 = c.pull(q).at(0);
    FailOptions now;
    now.retry_in = Duration(0);
    EXPECT_EQ(c.fail(id, j1.lease_token, "first", now), JobState::Available);
    JobInfo after1 = c.job_status(id);
    EXPECT_EQ(after1.last_error, "first");
    ASSERT_TRUE(after1.errors);
    EXPECT_NE(after1.errors->find("first"), std::string::npos);

    auto j2 = c.pull(q).at(0);
    EXPECT_EQ(j2.attempt, 2);
    EXPECT_NE(j2.lease_token, j1.lease_token) << "every claim gets a fresh fencing token";
    EXPECT_FALSE(c.complete(id, j1.lease_token)) << "the old token is fenced out";
    EXPECT_EQ(c.fail(id, j2.lease_token, "second"), JobState::Dead) << "attempts are used up";
    EXPECT_EQ(c.job_status(id).state, JobState::Dead);
}

TEST_F(ClientTest, FailWithBackoffOrPermanent) {
    std::string q = unique_queue("backoff");
    int64_t a = c.push(q, "{}");
    auto ja = c.pull(q).at(0);
    FailOptions later;
    later.retry_in = 1h;
    EXPECT_EQ(c.fail(a, ja.lease_token, "not yet", later), JobState::Scheduled);
    EXPECT_GT(c.job_status(a).run_at, Clock::now() + 50min);

    int64_t b = c.push(q, "{}");
    auto jb = c.pull(q).at(0);
    ASSERT_EQ(jb.id, b);
    FailOptions never;
    never.permanent = true;
    EXPECT_EQ(c.fail(b, jb.lease_token, "bad input", never), JobState::Dead);
    EXPECT_EQ(c.job_status(b).attempt, 1);
}

TEST_F(ClientTest, HeartbeatExtendsTheLease) {
    std::string q = unique_queue("hb");
    int64_t id = c.push(q, "{}");
    PullOptions po;
    po.lease = 2s;
    auto j = c.pull(q, po).at(0);
    EXPECT_TRUE(c.heartbeat(id, j.lease_token, Duration(1h)));
    // With the lease extended by an hour, a pull 30 minutes ahead cannot take the job over.
    PullOptions ahead;
    ahead.at = Clock::now() + 30min;
    EXPECT_TRUE(c.pull(q, ahead).empty());
    // Two hours ahead the lease has run out: the job is taken over, the old token is stale.
    ahead.at = Clock::now() + 2h;
    auto taken = c.pull(q, ahead);
    ASSERT_EQ(taken.size(), 1u);
    EXPECT_EQ(taken[0].attempt, 2);
    EXPECT_FALSE(c.heartbeat(id, j.lease_token));
}

TEST_F(ClientTest, ProgressIsStoredAndChecked) {
    std::string q = unique_queue("progress");
    int64_t id = c.push(q, "{}");
    auto j = c.pull(q).at(0);
    EXPECT_TRUE(c.progress(id, j.lease_token, 0.25, std::string(R"({"step": "encode"})")));
    JobInfo s = c.job_status(id);
    ASSERT_TRUE(s.progress);
    EXPECT_DOUBLE_EQ(*s.progress, 0.25);
    EXPECT_EQ(s.progress_detail, R"({"step": "encode"})");
    std::string msg = expect_sqlstate("22023", [&] { c.progress(id, j.lease_token, 1.5); });
    EXPECT_NE(msg.find("progress"), std::string::npos) << msg;
}

// A fraction too small for the server's real (below about 1.2e-38) was refused as "out of range
// for type real": it is progress 0, as a real holds it.
TEST_F(ClientTest, ProgressTooSmallForARealIsZero) {
    std::string q = unique_queue("progress");
    int64_t id = c.push(q, "{}");
    auto j = c.pull(q).at(0);
    for (double tiny : {1e-50, 1e-300, -1e-50, 5e-324}) {
        EXPECT_TRUE(c.progress(id, j.lease_token, tiny)) << tiny;
        EXPECT_EQ(c.job_status(id).progress, std::optional<double>(0.0)) << tiny;
    }
    EXPECT_TRUE(c.progress(id, j.lease_token, 1e-6));
    ASSERT_TRUE(c.job_status(id).progress);
    EXPECT_NEAR(*c.job_status(id).progress, 1e-6, 1e-12);
}

// A jitter too small for the server's real was refused the same way; one too large for it, where
// the server names jitter's own range (0-1), as "out of range for type real" (22003).
TEST_F(ClientTest, JitterOutsideARealsRangeIsReadAsTheServerWould) {
    std::string q = unique_queue("jitter");
    auto jitter = [&] {
        return c.exec("SELECT jitter::float8 FROM hopper.queues WHERE name = $1", q).float8(0, 0);
    };
    for (double tiny : {1e-50, -1e-50, 5e-324}) {
        QueueOptions o;
        o.jitter = tiny;
        c.queue_create(q, o);
        EXPECT_EQ(jitter(), 0.0) << tiny;
    }
    QueueOptions small;
    small.jitter = 1e-6;
    c.queue_create(q, small);
    EXPECT_NEAR(jitter(), 1e-6, 1e-12);
    for (double large : {1e50, -1e50, 1e300}) {
        QueueOptions o;
        o.jitter = large;
        std::string msg = expect_sqlstate("22023", [&] { c.queue_create(q, o); });
        EXPECT_NE(msg.find("jitter must be between 0 and 1"), std::string::npos) << msg;
    }
    int64_t id = c.push(q, "{}");
    Job j = c.pull(q).at(0);
    std::string msg = expect_sqlstate("22023", [&] { c.progress(id, j.lease_token, 1e50); });
    EXPECT_NE(msg.find("progress"), std::string::npos) << msg;
}

// Duration::max(), "no timeout" to wait_for, reached the server as an interval past its range:
// "interval out of range" (22008), naming no argument. Each option so given is refused as any
// value out of its range is, by the server, naming it (22023); so is Duration::min().
TEST_F(ClientTest, TheLongestDurationsAreRefusedNamingTheirOption) {
    std::string q = unique_queue("longest");
    c.queue_create(q);
    int64_t id = c.push(q, "{}");
    Job j = c.pull(q).at(0);
    int64_t other = c.push(q, "{}");
    for (Duration d : {Duration::max(), Duration::min()}) {
        SCOPED_TRACE(d == Duration::max() ? "Duration::max()" : "Duration::min()");
        auto refused = [&](const std::string& option, auto fn) {
            std::string msg = expect_sqlstate("22023", fn);
            EXPECT_EQ(msg.rfind(option + " must be", 0), 0u) << msg;
        };
        refused("lease", [&] {
            QueueOptions o;
            o.lease = d;
            c.queue_create(q, o);
        });
        refused("backoff_base", [&] {
            QueueOptions o;
            o.backoff_base = d;
            c.queue_create(q, o);
        });
        refused("backoff_cap", [&] {
            QueueOptions o;
            o.backoff_cap = d;
            c.queue_create(q, o);
        });
        refused("retention", [&] {
            QueueOptions o;
            o.retention = d;
            c.queue_create(q, o);
        });
        refused("dedup_window", [&] {
            PushOptions o;
            o.dedup_key = "k";
            o.dedup_window = d;
            c.push(q, "{}", o);
        });
        refused("dedup_window", [&] {
            BatchPushOptions o;
            o.dedup_keys = {"k"};
            o.dedup_window = d;
            c.push_batch(q, {"{}"}, o);
        });
        refused("wait", [&] {
            PullOptions o;
            o.wait = d;
            c.pull(q, o);
        });
        refused("lease", [&] {
            PullOptions o;
            o.lease = d;
            c.pull(q, o);
        });
        refused("lease", [&] {
            PullOptions o;
            o.lease = d;
            std::vector<int64_t> done;
            c.complete_many_and_pull({}, {}, {}, q, o, done);
        });
        refused("wait", [&] {
            Transaction tx(c);
            TakeOptions o;
            o.wait = d;
            c.take(q, o);
        });
        refused("retry_in", [&] {
            FailOptions o;
            o.retry_in = d;
            c.fail(id, j.lease_token, "x", o);
        });
        refused("retry_in", [&] {
            FailOptions o;
            o.retry_in = d;
            c.fail_taken(other, "x", o);
        });
        refused("extend", [&] { c.heartbeat(id, j.lease_token, d); });
    }
    // The job was left as it was.
    EXPECT_EQ(c.job_status(id).state, JobState::Running);
    EXPECT_TRUE(c.heartbeat(id, j.lease_token, std::chrono::minutes(5)));
}

TEST_F(ClientTest, ReleaseGivesTheJobBack) {
    std::string q = unique_queue("release");
    int64_t id = c.push(q, "{}");
    auto j = c.pull(q).at(0);
    EXPECT_TRUE(c.release(id, j.lease_token));
    EXPECT_EQ(c.job_status(id).state, JobState::Available);
    auto again = c.pull(q);
    ASSERT_EQ(again.size(), 1u);
    EXPECT_EQ(again[0].id, id);
}

// A pulled job says how long its lease has left by the server's clock alone, which a worker times
// its heartbeats by whatever its own clock says: the lease the pull asked for, or the queue's, from
// the claim (a waiting pull's from when it claimed, not from when it began to wait).
TEST_F(ClientTest, APulledJobCarriesWhatIsLeftOfItsLease) {
    std::string q = unique_queue("left");
    QueueOptions qo;
    qo.lease = 10s;
    c.queue_create(q, qo);
    c.push_batch(q, {"{}", "{}", "{}"});
    auto about = [](const Job& j, Duration lease) {
        return j.lease_left > lease / 2 && j.lease_left <= lease;
    };
    Job j = c.pull(q).at(0);
    EXPECT_TRUE(about(j, 10s)) << j.lease_left.count();
    PullOptions short_lease;
    short_lease.lease = 2s;
    Job k = c.pull(q, short_lease).at(0);
    EXPECT_TRUE(about(k, 2s)) << k.lease_left.count();
    std::vector<int64_t> completed;
    auto next = c.complete_many_and_pull({j.id}, {j.lease_token}, {}, q, {}, completed);
    ASSERT_EQ(next.size(), 1u);
    EXPECT_TRUE(about(next[0], 10s)) << next[0].lease_left.count();

    PullOptions waiting;
    waiting.wait = 30s;
    std::thread producer([&] {
        Client other{conninfo()};
        std::this_thread::sleep_for(1500ms);
        other.push(q, "{}");
    });
    auto jobs = c.pull(q, waiting);
    producer.join();
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_TRUE(about(jobs[0], 10s)) << jobs[0].lease_left.count();
}

TEST_F(ClientTest, PullWaitsForAPush) {
    std::string q = unique_queue("wait");
    c.queue_create(q);
    PullOptions po;
    po.wait = 200ms;
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(c.pull(q, po).empty());
    EXPECT_GE(std::chrono::steady_clock::now() - t0, 200ms)
        << "an empty queue: the pull waits the whole interval";

    // A push from another connection while the pull waits: it returns with that job, long
    // before its wait runs out.
    po.wait = 30s;
    int64_t pushed = 0;
    std::thread producer([&] {
        Client other{conninfo()};
        std::this_thread::sleep_for(300ms);
        pushed = other.push(q, R"({"late": true})");
    });
    t0 = std::chrono::steady_clock::now();
    auto jobs = c.pull(q, po);
    auto waited = std::chrono::steady_clock::now() - t0;
    producer.join();
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].id, pushed);
    EXPECT_LT(waited, 10s);
}

// A push signals the first waiting pull on the list. When that pull is not asleep but claiming
// another job, it leaves with that one, and the signal goes on to the next waiting pull, which
// takes the job as soon as the first has left rather than at its next look, a second after it
// began to wait. PostgreSQL's ConditionVariableCancelSleep hands the signal on, as
// extension/include/hopper/pull_wait.hpp relies on. A trigger of the user's on hopper.jobs makes
// the first claim slow.
TEST_F(ClientTest, APushThatReachesAPullLeavingWithAnotherJobWakesTheNextOne) {
    std::string q = unique_queue("handon");
    c.queue_create(q);
    c.exec(
        "CREATE FUNCTION public.handon_slow_claim() RETURNS trigger LANGUAGE plpgsql AS $$ "
        "BEGIN IF NEW.payload ? 'slow' AND NEW.lease_until IS NOT NULL "
        "AND OLD.lease_until IS NULL THEN PERFORM pg_sleep(0.7); END IF; RETURN NEW; END $$");
    c.exec(
        "CREATE TRIGGER handon_slow_claim BEFORE UPDATE ON hopper.jobs FOR EACH ROW "
        "EXECUTE FUNCTION public.handon_slow_claim()");
    struct DropTrigger {  // other tests' claims must not run as statements
        Client& c;
        ~DropTrigger() {
            c.exec("DROP TRIGGER handon_slow_claim ON hopper.jobs");
            c.exec("DROP FUNCTION public.handon_slow_claim()");
        }
    } drop{c};
    PullOptions po;
    po.wait = 20s;
    auto pull_as = [&](const std::string& name) {
        return std::async(std::launch::async, [&, name] {
            Client w(hopper::test::named_conninfo(name));
            std::vector<Job> jobs = w.pull(q, po);
            return std::make_pair(jobs, std::chrono::steady_clock::now());
        });
    };
    auto waiting = [&](const std::string& name) {
        return eventually([&] { return hopper::test::waiting_in(c, name, "queue_pull") == 1; });
    };
    auto first = pull_as(q + "_1");
    ASSERT_TRUE(waiting(q + "_1"));
    c.push(q, R"({"slow": true})");
    ASSERT_TRUE(eventually([&] {  // woken, and claiming in the trigger's sleep
        return c.exec(
                    "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE application_name = "
                    "$1 AND wait_event = 'PgSleep'",
                    q + "_1")
                   .int64(0, 0) == 1;
    }));
    auto second = pull_as(q + "_2");
    ASSERT_TRUE(waiting(q + "_2"));
    auto pushed_at = std::chrono::steady_clock::now();
    int64_t id = c.push(q, "{}");
    auto [slow, first_left_at] = first.get();
    auto [jobs, taken_at] = second.get();
    ASSERT_EQ(slow.size(), 1u);
    ASSERT_LT(pushed_at, first_left_at) << "the first claim ended before the push";
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].id, id);
    // The next look of the second pull came about a second after it began to wait.
    EXPECT_LT(taken_at - first_left_at, 500ms)
        << "taken "
        << std::chrono::duration_cast<std::chrono::milliseconds>(taken_at - first_left_at).count()
        << " ms after the first pull left";
}

TEST_F(ClientTest, APullInTheBackgroundReturnsOrIsCancelled) {
    std::string q = unique_queue("wait");
    c.queue_create(q);
    Client other{conninfo()};
    PullOptions po;
    po.n = 2;
    po.wait = 30s;
    c.begin_pull(q, po);
    std::this_thread::sleep_for(200ms);
    EXPECT_FALSE(c.pull_ready()) << "nothing to claim: the pull is still waiting";
    int64_t pushed = other.push(q, "{}");
    ASSERT_TRUE(eventually([&] { return c.pull_ready(); }, 10s));
    std::vector<Job> jobs = c.finish_pull();
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].id, pushed);
    EXPECT_EQ(other.job_status(pushed).state, JobState::Running);

    // Cancelled while waiting: no jobs, no error, and the connection goes on.
    c.begin_pull(q, po);
    std::this_thread::sleep_for(200ms);
    auto t0 = std::chrono::steady_clock::now();
    c.cancel_pull();
    EXPECT_TRUE(c.finish_pull().empty());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
    int64_t later = c.push(q, "{}");
    EXPECT_EQ(other.job_status(later).state, JobState::Available)
        << "the cancelled pull took nothing";
    EXPECT_TRUE(c.complete(jobs[0].id, jobs[0].lease_token));

    // A server error still comes through finish_pull.
    po.n = 0;
    c.begin_pull(q, po);
    try {
        c.finish_pull();
        ADD_FAILURE() << "a pull of 0 jobs succeeded";
    } catch (const Error& e) {
        EXPECT_EQ(e.sqlstate(), "22023");
    }
}

TEST_F(ClientTest, CancelAndRetry) {
    std::string q = unique_queue("cancel");
    int64_t id = c.push(q, "{}");
    EXPECT_TRUE(c.cancel(id));
    EXPECT_EQ(c.job_status(id).state, JobState::Cancelled);
    EXPECT_FALSE(c.cancel(id)) << "a finished job cannot be cancelled again";
    EXPECT_TRUE(c.retry(id));
    EXPECT_EQ(c.job_status(id).state, JobState::Available);
    expect_sqlstate("55000", [&] { c.retry(id); });
}

TEST_F(ClientTest, KindsFilterPulls) {
    std::string q = unique_queue("kinds");
    PushOptions a, b;
    a.kind = "a";
    b.kind = "b";
    c.push(q, "{}", a);
    int64_t idb = c.push(q, "{}", b);
    PullOptions po;
    po.kinds = {"b", "c"};
    po.n = 5;
    auto jobs = c.pull(q, po);
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].id, idb);
}

TEST_F(ClientTest, StatsAndJobsListing) {
    std::string q = unique_queue("stats");
    int64_t a = c.push(q, "{}");
    int64_t b = c.push(q, "{}");
    PushOptions later;
    later.run_at = Clock::now() + 1h;
    c.push(q, "{}", later);
    auto j = c.pull(q).at(0);
    ASSERT_EQ(j.id, a);
    FailOptions dead;
    dead.permanent = true;
    c.fail(a, j.lease_token, "boom", dead);
    c.cancel(b);
    QueueStat s = c.stats(q).at(0);
    EXPECT_EQ(s.queue, q);
    EXPECT_EQ(s.available, 0);
    EXPECT_EQ(s.scheduled, 1);
    EXPECT_EQ(s.running, 0);
    EXPECT_EQ(s.dead, 1);
    EXPECT_EQ(s.cancelled, 1);
    EXPECT_EQ(s.completed, 0);
    EXPECT_FALSE(s.oldest_available_age);

    auto all = c.jobs(q);
    ASSERT_EQ(all.size(), 3u);
    EXPECT_GT(all[0].id, all[1].id) << "newest first";
    auto dead_jobs = c.jobs(q, JobState::Dead);
    ASSERT_EQ(dead_jobs.size(), 1u);
    EXPECT_EQ(dead_jobs[0].id, a);
    EXPECT_EQ(dead_jobs[0].last_error, "boom");
    EXPECT_EQ(c.jobs(q, std::nullopt, 1).size(), 1u);
    expect_sqlstate("22023", [&] { c.jobs(q, std::nullopt, 0); });
    expect_sqlstate("P0002", [&] { c.jobs("no_such_queue_x"); });

    bool found = false;
    for (const auto& st : c.stats())
        if (st.queue == q) found = true;
    EXPECT_TRUE(found) << "stats() without a queue lists every queue";
}

TEST_F(ClientTest, ErrorsCarryTheirSqlstate) {
    expect_sqlstate("P0002", [&] { c.job_status(987654321); });
    expect_sqlstate("P0002", [&] { c.cancel(987654321); });
    expect_sqlstate("P0002", [&] { c.complete(987654321, 1); });
    std::string msg = expect_sqlstate("22023", [&] { c.push("bad queue name!", "{}"); });
    EXPECT_NE(msg.find("queue"), std::string::npos);
    msg = expect_sqlstate("22023", [&] { c.push(unique_queue("e"), "[1, 2]"); });
    EXPECT_NE(msg.find("payload"), std::string::npos);
    PullOptions zero;
    zero.n = 0;
    expect_sqlstate("22023", [&] { c.pull(unique_queue("e"), zero); });
    PullOptions huge;
    huge.n = 100000;
    expect_sqlstate("22023", [&] { c.pull(unique_queue("e"), huge); });
    expect_sqlstate("22P02", [&] { c.push(unique_queue("e"), "{not json"); });
    // The connection is still usable after errors.
    EXPECT_GT(c.push(unique_queue("e"), "{}"), 0);
}

TEST_F(ClientTest, ExecBindsParametersNeverSplices) {
    c.exec("CREATE TABLE IF NOT EXISTS notes (id serial PRIMARY KEY, body text, n int)");
    std::string evil = "x'); DROP TABLE notes; --";
    auto r = c.exec("INSERT INTO notes (body, n) VALUES ($1, $2) RETURNING id, body, n", evil, 7);
    ASSERT_EQ(r.rows(), 1);
    EXPECT_EQ(r.text(0, 1), evil);
    EXPECT_EQ(r.int64(0, 2), 7);
    auto nulls = c.exec("SELECT $1::text IS NULL, $2::int", std::nullopt, std::optional<int>(3));
    EXPECT_TRUE(nulls.boolean(0, 0));
    EXPECT_EQ(nulls.int64(0, 1), 3);
    EXPECT_EQ(c.exec("SELECT count(*) FROM notes").int64(0, 0), 1);
    expect_sqlstate("22012", [&] { c.exec("SELECT 1 / $1::int", 0); });
}

// A moved-from client has no conninfo left: reconnecting it reached whatever database the PG*
// environment names, and its calls ran there.
TEST_F(ClientTest, AMovedFromClientRefusesToRun) {
    std::string q = unique_queue("moved");
    Client moved(conninfo());
    Client to(std::move(moved));
    EXPECT_GT(to.push(q, "{}"), 0);
    EXPECT_THROW(moved.push(q, "{}"), std::logic_error);  // NOLINT(bugprone-use-after-move)
    EXPECT_THROW(moved.reconnect(), std::logic_error);
    EXPECT_EQ(c.stats(q).at(0).available, 1);
}

// DEALLOCATE ALL (or DISCARD ALL, which poolers run) drops the prepared statements behind the
// client's back: every later call failed with 26000 until a reconnect.
TEST_F(ClientTest, CallsPrepareAgainAfterDeallocateAll) {
    std::string q = unique_queue("dealloc");
    c.push(q, "{}");
    c.exec("DEALLOCATE ALL");
    EXPECT_GT(c.push(q, "{}"), 0);
    c.exec("DISCARD ALL");
    EXPECT_GT(c.push(q, "{}"), 0);
    // Inside a transaction the refused call has aborted it; after the rollback calls work again.
    {
        Transaction tx(c);
        c.exec("DEALLOCATE ALL");
        expect_sqlstate("26000", [&] { c.push(q, "{}"); });
    }
    EXPECT_GT(c.push(q, "{}"), 0);
    EXPECT_EQ(c.stats(q).at(0).available, 4);
}

// A 26000 from a statement of the caller's own (a plan gone with a reconnect) is no news about
// the client's statements, which are still prepared: the next calls work (they failed with 42P05
// for the life of the connection).
TEST_F(ClientTest, AnotherStatementsUnknownNameLeavesTheClientsStatementsWorking) {
    std::string q = unique_queue("unknown_plan");
    c.push(q, "{}");
    expect_sqlstate("26000", [&] { c.exec("EXECUTE no_such_plan"); });
    EXPECT_GT(c.push(q, "{}"), 0);
    EXPECT_EQ(c.stats(q).at(0).available, 2);
}

// The same inside a transaction the caller keeps alive with a savepoint: forgetting every
// statement on the caller's 26000 made the next push prepare its statement again, which the
// server refused (42P05), aborting the transaction.
TEST_F(ClientTest, AnotherStatementsUnknownNameInATransactionLeavesItUsable) {
    std::string q = unique_queue("unknown_plan_tx");
    c.push(q, "{}");
    c.stats(q);
    {
        Transaction tx(c);
        c.exec("SAVEPOINT s");
        expect_sqlstate("26000", [&] { c.exec("EXECUTE no_such_plan"); });
        c.exec("ROLLBACK TO SAVEPOINT s");
        EXPECT_GT(c.push(q, "{}"), 0);
        EXPECT_EQ(c.stats(q).at(0).available, 2);
        tx.commit();
    }
    EXPECT_EQ(c.stats(q).at(0).available, 2);
    // DEALLOCATE ALL still has each statement prepared again at its next call.
    c.exec("DEALLOCATE ALL");
    EXPECT_GT(c.push(q, "{}"), 0);
    EXPECT_EQ(c.stats(q).at(0).available, 3);
}

// Text parameters travel as C strings: a NUL byte cut the value short without a word (a payload
// stored without its tail, "user\0 1" and "user\0 2" the same dedup key, an error text cut).
// They are refused before anything is sent, so a transaction goes on.
TEST_F(ClientTest, ANulByteInATextParameterIsRefused) {
    std::string q = unique_queue("nul");
    c.queue_create(q);
    expect_sqlstate("22021", [&] { c.push(q, std::string("{\"a\":1}\0 garbage", 16)); });
    PushOptions a;
    a.dedup_key = std::string(
        "user\0"
        "1",
        6);
    expect_sqlstate("22021", [&] { c.push(q, "{}", a); });
    std::string msg = expect_sqlstate(
        "22021", [&] { c.exec("SELECT $1::text, $2::text", "ok", std::string("abc\0def", 7)); });
    EXPECT_NE(msg.find("$2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("NUL"), std::string::npos) << msg;
    int64_t id = c.push(q, "{}");
    Job j = c.pull(q).at(0);
    {
        Transaction tx(c);
        expect_sqlstate("22021",
                        [&] { c.fail(id, j.lease_token, std::string("disk full\0 at /x", 16)); });
        EXPECT_TRUE(c.fail(id, j.lease_token, "disk full").has_value())
            << "nothing was sent: the transaction goes on";
        tx.commit();
    }
    EXPECT_EQ(c.job_status(id).last_error, std::optional<std::string>("disk full"));
    EXPECT_EQ(c.jobs(q).size(), 1u) << "only the job pushed without a NUL exists";
}

// A server error on a live connection keeps its SQLSTATE, detail and hint whatever its class:
// a dblink's 08001 (the remote server is down) became ConnectionError 08006 without them.
TEST_F(ClientTest, AClass08ErrorOnALiveConnectionIsAPlainError) {
    try {
        c.exec(
            "DO $$BEGIN RAISE EXCEPTION 'remote is down' USING ERRCODE = '08001', "
            "DETAIL = 'd', HINT = 'h'; END$$");
        ADD_FAILURE() << "the RAISE succeeded";
    } catch (const ConnectionError& e) {
        ADD_FAILURE() << "a ConnectionError on a live connection: " << e.sqlstate() << " "
                      << e.what();
    } catch (const Error& e) {
        EXPECT_EQ(e.sqlstate(), "08001");
        EXPECT_EQ(std::string(e.what()), "remote is down");
        EXPECT_EQ(e.detail(), "d");
        EXPECT_EQ(e.hint(), "h");
    }
    EXPECT_TRUE(c.connection().ok());
    expect_sqlstate(
        "57P01", [&] { c.exec("DO $$BEGIN RAISE EXCEPTION 'x' USING ERRCODE = '57P01'; END$$"); });
    EXPECT_EQ(c.exec("SELECT 1").int64(0, 0), 1);
}

// The session really ended by the server (57P01) is still a ConnectionError, which the workers'
// reconnecting relies on; its message gives the server's reason.
TEST_F(ClientTest, ATerminatedSessionIsAConnectionError) {
    Client admin{conninfo()};
    int pid = c.connection().backend_pid();
    admin.exec("SELECT pg_catalog.pg_terminate_backend($1)", pid);
    ASSERT_TRUE(eventually([&] {
        return admin.exec("SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE pid = $1", pid)
                   .int64(0, 0) == 0;
    }));
    try {
        c.exec("SELECT 1");
        ADD_FAILURE() << "a terminated session ran a statement";
    } catch (const ConnectionError& e) {
        EXPECT_EQ(e.sqlstate(), "08006");
        EXPECT_NE(std::string(e.what()).find("administrator command"), std::string::npos)
            << e.what();
    }
    EXPECT_FALSE(c.connection().ok());
    EXPECT_NO_THROW(c.stats()) << "the next call reconnects";
    EXPECT_TRUE(c.connection().ok());
}

// The channels listened on through the connection outlive the reconnect that the next call
// makes, so a caller keeps hearing them; one it stopped listening on stays stopped.
TEST_F(ClientTest, ListensAgainAfterAReconnect) {
    Client admin{conninfo()};
    const std::string kept = unique_queue("listen") + ":kept";
    const std::string dropped = unique_queue("listen") + ":dropped";
    c.connection().listen(kept);
    c.connection().listen(kept);
    c.connection().listen(dropped);
    c.connection().unlisten(dropped);
    int pid = c.connection().backend_pid();
    admin.exec("SELECT pg_catalog.pg_terminate_backend($1)", pid);
    ASSERT_TRUE(eventually([&] {
        return admin.exec("SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE pid = $1", pid)
                   .int64(0, 0) == 0;
    }));
    EXPECT_THROW(c.exec("SELECT 1"), ConnectionError);
    EXPECT_NO_THROW(c.stats()) << "the next call reconnects";
    ASSERT_NE(c.connection().backend_pid(), pid);
    EXPECT_EQ(c.exec("SELECT pg_catalog.string_agg(c, ',') FROM "
                     "pg_catalog.pg_listening_channels() AS c")
                  .text(0, 0),
              kept);
    admin.exec("SELECT pg_catalog.pg_notify($1, 'after')", kept);
    std::vector<Notification> got;
    eventually([&] {
        c.connection().wait(100ms);
        for (auto& n : c.connection().notifications()) got.push_back(std::move(n));
        return !got.empty();
    });
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].channel, kept);
    EXPECT_EQ(got[0].payload, "after");
}

// A moved-from connection has no session to listen with: that is the caller's mistake.
TEST(Connection, ListenAfterAMoveIsALogicError) {
    Connection a(conninfo());
    Connection b(std::move(a));
    EXPECT_THROW(a.listen("x"), std::logic_error);    // NOLINT(bugprone-use-after-move)
    EXPECT_THROW(a.unlisten("x"), std::logic_error);  // NOLINT(bugprone-use-after-move)
    EXPECT_NO_THROW(b.listen("x"));
}

TEST_F(ClientTest, ExecOfNothingOrACopySaysSo) {
    try {
        c.exec("");
        ADD_FAILURE() << "an empty query succeeded";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("empty query"), std::string::npos) << e.what();
    }
    try {
        c.exec("COPY (SELECT 1) TO STDOUT");
        ADD_FAILURE() << "COPY TO STDOUT succeeded";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("COPY"), std::string::npos) << e.what();
        EXPECT_EQ(e.sqlstate(), "0A000");
    }
    try {
        c.exec("CREATE TEMP TABLE copy_in (v int)");
        c.exec("COPY copy_in FROM STDIN");
        ADD_FAILURE() << "COPY FROM STDIN succeeded";
    } catch (const Error& e) {
        EXPECT_EQ(e.sqlstate(), "0A000") << e.what();
    }
    // The COPY was ended: the connection runs statements again.
    EXPECT_EQ(c.exec("SELECT 41 + 1").int64(0, 0), 42);
}

TEST_F(ClientTest, FinishPullWithoutBeginPullIsALogicError) {
    EXPECT_THROW(c.finish_pull(), std::logic_error);
    EXPECT_THROW(c.pull_ready(), std::logic_error);
    EXPECT_EQ(c.exec("SELECT 1").int64(0, 0), 1);
}

// A second begin_pull, or any other call, while a pull is out is the caller's mistake: it was a
// ConnectionError ("another command is already in progress") on a connection that was fine.
TEST_F(ClientTest, ACallWhileAPullIsOutIsALogicError) {
    std::string q = unique_queue("twice");
    c.queue_create(q);
    PullOptions po;
    po.wait = 200ms;
    c.begin_pull(q, po);
    EXPECT_THROW(c.begin_pull(q, po), std::logic_error);
    EXPECT_THROW(c.push(q, "{}"), std::logic_error);
    EXPECT_THROW(c.exec("SELECT 1"), std::logic_error);
    EXPECT_TRUE(c.finish_pull().empty());
    EXPECT_GT(c.push(q, "{}"), 0);
    EXPECT_EQ(c.exec("SELECT 1").int64(0, 0), 1);
}

// DEALLOCATE ALL / DISCARD ALL outside a transaction: a background pull is prepared and sent
// again too, whether the caller polls pull_ready() or goes straight to finish_pull().
TEST_F(ClientTest, ABackgroundPullIsSentAgainAfterDeallocateAll) {
    std::string q = unique_queue("dealloc_pull");
    PullOptions po;
    po.wait = 100ms;
    c.queue_create(q);
    c.pull(q, po);  // prepared
    int64_t a = c.push(q, "{}");
    c.exec("DEALLOCATE ALL");
    c.begin_pull(q, po);
    ASSERT_TRUE(eventually([&] { return c.pull_ready(); }, 10s));
    std::vector<Job> jobs = c.finish_pull();
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].id, a);

    int64_t b = c.push(q, "{}");
    c.exec("DISCARD ALL");
    c.begin_pull(q, po);
    jobs = c.finish_pull();
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].id, b);

    // Inside a transaction the error stands, and the pull works again after the rollback.
    c.push(q, "{}");
    {
        Transaction tx(c);
        c.exec("DEALLOCATE ALL");
        c.begin_pull(q, po);
        expect_sqlstate("26000", [&] { c.finish_pull(); });
    }
    c.begin_pull(q, po);
    EXPECT_EQ(c.finish_pull().size(), 1u);

    // A pull cancelled meanwhile is not sent again to wait its whole time.
    c.exec("DEALLOCATE ALL");
    po.wait = 30s;
    c.begin_pull(q, po);
    c.cancel_pull();
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(c.finish_pull().empty());
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
    EXPECT_EQ(c.exec("SELECT 1").int64(0, 0), 1);
}

// Times go to the server as integer microseconds and come back the same, to the microsecond,
// up to the clock's end in 2262 (through float8 seconds, about one time in twenty from 2106 on
// came back 1 us off; microseconds alone through float8 would be off past 2255).
TEST_F(ClientTest, TimesKeepTheirMicroseconds) {
    std::string q = unique_queue("us");
    for (const char* t : {"2106-02-07 09:43:45.413179+00", "2199-12-31 23:59:59.999999+00",
                          "2255-06-05 23:47:34.740993+00", "2262-04-11 23:47:16.854774+00"}) {
        TimePoint at{std::chrono::microseconds(
            c.exec("SELECT (EXTRACT(epoch FROM $1::timestamptz) * 1000000)::int8", t).int64(0, 0))};
        int64_t id = c.push(q, "{}");
        PullOptions o;
        o.at = at;  // the job starts "at" that time: started_at
        ASSERT_EQ(c.pull(q, o).size(), 1u);
        EXPECT_TRUE(
            c.exec("SELECT started_at = $2::timestamptz FROM hopper.job_status($1::int8)", id, t)
                .boolean(0, 0))
            << t << " stored as "
            << c.exec("SELECT started_at::text FROM hopper.job_status($1::int8)", id).text(0, 0);
        EXPECT_EQ(c.job_status(id).started_at, std::optional<TimePoint>(at)) << t;
    }
}

TEST_F(ClientTest, ACharParameterIsOneCharacter) {
    EXPECT_EQ(c.exec("SELECT $1::text", 'a').text(0, 0), "a");
    EXPECT_EQ(c.exec("SELECT $1::int", 97).int64(0, 0), 97);
}

// A connection straight to the server is no pooler's: the pid it announced is the server's, and
// its calls use the statements they prepare.
TEST(Pooler, ADirectConnectionIsNotPooled) {
    Client c(conninfo());
    EXPECT_FALSE(c.connection().pooled());
    EXPECT_EQ(c.connection().server_pid(), c.connection().backend_pid());
    EXPECT_EQ(c.connection().server_pid(), c.exec("SELECT pg_backend_pid()").int64(0, 0));
}

// Behind PgBouncer in transaction mode (test/e2e/pooler.sh runs it), the server session of a
// transaction may hold a statement another client prepared under the client's name: a push in a
// Transaction failed with 42P05, and a statement the client prepared in another session failed
// with 26000. Pooled (here HOPPER_POOLER=on, on a direct connection), every call is an unnamed
// statement, so names prepared in the session, here each with other SQL, change nothing.
TEST(Pooler, CallsIgnoreTheStatementsPreparedInTheSession) {
    test::PoolerSetting on("on");
    Client c(conninfo());
    ASSERT_TRUE(c.connection().pooled());
    const std::string q = unique_queue("pooled");
    c.exec("PREPARE hopper_push AS SELECT 'x'");
    c.exec("PREPARE hopper_pull AS SELECT 'x'");
    int64_t id;
    {
        Transaction tx(c);
        id = c.push(q, "{}");
        tx.commit();
    }
    PullOptions po;
    po.wait = 5s;
    c.begin_pull(q, po);  // the background pull too
    ASSERT_TRUE(eventually([&] { return c.pull_ready(); }, 10s));
    std::vector<Job> jobs = c.finish_pull();
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].id, id);
    EXPECT_TRUE(c.complete(id, jobs[0].lease_token));
    EXPECT_EQ(c.connection().server_pid(), c.exec("SELECT pg_backend_pid()").int64(0, 0));
}

TEST(Pooler, TheSettingIsReadAtEachConnect) {
    {
        test::PoolerSetting off("off");
        Client c(conninfo());
        EXPECT_FALSE(c.connection().pooled());
    }
    {
        test::PoolerSetting on("on");
        Client c(conninfo());
        EXPECT_TRUE(c.connection().pooled());
    }
    test::PoolerSetting bad("yes");
    EXPECT_THROW(Client{conninfo()}, std::invalid_argument);
}

TEST(ClientConnect, BadConninfoIsAConnectionError) {
    EXPECT_THROW(Client("host=/nonexistent/socket/dir port=1 connect_timeout=2"), ConnectionError);
    try {
        Client bad("dbname=hopper_no_such_database_x");
        FAIL() << "connected to a database that does not exist";
    } catch (const ConnectionError& e) {
        EXPECT_NE(std::string(e.what()).find("hopper_no_such_database_x"), std::string::npos);
    }
}

}  // namespace
}  // namespace hopper
