// The worker runtimes at the edges: reports the server refuses, durations past the clock's range,
// options out of range, signal handling shared by several workers, and sessions the server would
// end for being idle.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <future>
#include <limits>
#include <memory>
#include <thread>
#include <utility>

#include <gtest/gtest.h>

#include "hopper/take_worker.hpp"
#include "hopper/worker.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using hopper::test::conninfo;
using hopper::test::eventually;
using hopper::test::unique_queue;

namespace hopper {
namespace {

template <typename Options>
Options quiet(Options o, const std::string& queue) {
    o.conninfo = conninfo();
    o.queue = queue;
    o.handle_signals = false;
    o.poll_interval = 500ms;
    o.log = [](const std::string&) {};
    return o;
}

bool state_is(Client& c, int64_t id, JobState s) {
    return c.job_status(id).state == s;
}

int64_t push_kind(Client& c, const std::string& queue, const std::string& kind,
                  std::optional<int> max_attempts = {}) {
    PushOptions po;
    po.kind = kind;
    po.max_attempts = max_attempts;
    return c.push(queue, "{}", po);
}

// What a handler may throw or leave that the server would refuse to record as it is.
void register_refusable(Worker& w) {
    w.on("latin1", [](JobContext&) { throw std::runtime_error("cannot open /data/caf\xe9.mp4"); });
    w.on("past", [](JobContext&) { throw RetryIn(-5s, "too soon"); });
    w.on("far", [](JobContext&) { throw RetryIn(std::chrono::hours(24 * 400), "next year"); });
    w.on("not_json", [](JobContext& job) { job.set_result("not json"); });
    w.on("nul", [](JobContext& job) { job.set_result(R"({"a": "\u0000"})"); });
    // A NUL byte itself: the result was cut there and stored as {"a": 1}.
    w.on("nul_byte", [](JobContext& job) { job.set_result(std::string("{\"a\": 1}\0 tail", 14)); });
    // JSON nested deeper than the server parses (54001, not class 22): the report was retried
    // until the lease ran out.
    w.on("deep", [](JobContext& job) {
        job.set_result("{\"a\": " + std::string(300000, '[') + std::string(300000, ']') + "}");
    });
}

// A report the server refused left its job running until the lease ran out, then it ran again
// and ended dead with "lease expired", the handler's error lost. Each such report now reaches the
// server: the error made valid UTF-8, the delay kept to its range, and a result it cannot store
// failing the job with the reason. With and without batched completions (the batch fell back to
// completing one by one, which failed the same way).
void refused_reports_are_recorded(bool batch_completions) {
    Client c(conninfo());
    std::string q = unique_queue("refused");
    WorkerOptions o = quiet(WorkerOptions{}, q);
    o.batch_completions = batch_completions;
    o.concurrency = 2;
    Worker w(o);
    register_refusable(w);
    w.on("good", [](JobContext& job) { job.set_result(R"({"ok": true})"); });
    int64_t latin1 = push_kind(c, q, "latin1", 1);
    int64_t past = push_kind(c, q, "past", 1);
    int64_t far = push_kind(c, q, "far", 2);
    int64_t not_json = push_kind(c, q, "not_json", 1);
    int64_t nul = push_kind(c, q, "nul", 1);
    int64_t nul_byte = push_kind(c, q, "nul_byte", 1);
    int64_t deep = push_kind(c, q, "deep", 1);
    int64_t good = push_kind(c, q, "good");
    test::Running<Worker> r(w);
    for (int64_t id : {latin1, past, not_json, nul, nul_byte, deep})
        ASSERT_TRUE(eventually([&] { return state_is(c, id, JobState::Dead); }, 20s))
            << "job " << id << " is " << to_string(c.job_status(id).state);
    ASSERT_TRUE(eventually([&] { return state_is(c, far, JobState::Scheduled); }, 20s));
    ASSERT_TRUE(eventually([&] { return state_is(c, good, JobState::Completed); }, 20s));
    r.stop();
    EXPECT_EQ(c.job_status(latin1).last_error, "cannot open /data/caf\xEF\xBF\xBD.mp4");
    EXPECT_EQ(c.job_status(past).last_error, "too soon");
    JobInfo f = c.job_status(far);
    EXPECT_EQ(f.last_error, "next year");
    EXPECT_GT(f.run_at, Clock::now() + std::chrono::hours(24 * 365));  // kept to 366 days
    EXPECT_LT(f.run_at, Clock::now() + std::chrono::hours(24 * 367));
    for (int64_t id : {not_json, nul, nul_byte, deep}) {
        JobInfo j = c.job_status(id);
        EXPECT_EQ(j.attempt, 1);
        EXPECT_EQ(j.last_error.value_or("").rfind("invalid result: ", 0), 0u)
            << j.last_error.value_or("(none)");
    }
    EXPECT_EQ(c.job_status(good).result, R"({"ok": true})");
    EXPECT_EQ(w.stats().lost, 0u);
}

TEST(WorkerLimits, RefusedReportsAreRecordedBatched) {
    refused_reports_are_recorded(true);
}

TEST(WorkerLimits, RefusedReportsAreRecordedOneByOne) {
    refused_reports_are_recorded(false);
}

// The take's transaction rolled back whole when queue_fail_taken refused the failure: no attempt
// counted, the good job of the batch undone, and the same jobs taken again for ever.
TEST(WorkerLimits, TakeWorkerRecordsFailuresTheServerWouldRefuse) {
    Client c(conninfo());
    std::string q = unique_queue("take_refused");
    QueueOptions qo;
    qo.backoff_base = std::chrono::hours(1);
    c.queue_create(q, qo);
    int64_t latin1 = push_kind(c, q, "latin1");
    int64_t past = push_kind(c, q, "past");
    int64_t far = push_kind(c, q, "far");
    int64_t good = push_kind(c, q, "good");
    TakeWorkerOptions o = quiet(TakeWorkerOptions{}, q);
    o.batch = 4;
    TakeWorker w(o);
    w.on("latin1",
         [](const Job&, Client&) { throw std::runtime_error("cannot open /data/caf\xe9.mp4"); });
    w.on("past", [](const Job& job, Client&) {
        if (job.attempt == 1) throw RetryIn(-5s, "too soon");
    });
    w.on("far", [](const Job&, Client&) { throw RetryIn(std::chrono::hours(24 * 400)); });
    w.on("good", [](const Job&, Client&) {});
    test::Running<TakeWorker> r(w);
    ASSERT_TRUE(eventually([&] { return state_is(c, good, JobState::Completed); }, 20s));
    ASSERT_TRUE(eventually([&] { return state_is(c, past, JobState::Completed); }, 20s));
    r.stop();
    JobInfo l = c.job_status(latin1);
    EXPECT_EQ(l.state, JobState::Scheduled);
    EXPECT_EQ(l.attempt, 1);
    EXPECT_EQ(l.last_error, "cannot open /data/caf\xEF\xBF\xBD.mp4");
    EXPECT_EQ(c.job_status(past).attempt, 2) << "retried at once: a negative delay is none";
    JobInfo f = c.job_status(far);
    EXPECT_EQ(f.attempt, 1);
    EXPECT_GT(f.run_at, Clock::now() + std::chrono::hours(24 * 365));
}

// Has the server refuse, once, the first failure recorded for a job of `queue` (its update of
// hopper.jobs, from queue_fail or queue_fail_taken) with `sqlstate`, as a serialization failure or
// a lock timeout would. Removed at the end.
class RefuseOneFailure {
  public:
    RefuseOneFailure(Client& c, const std::string& queue, const std::string& sqlstate)
        : c_(c), seq_(c.connection().escape_identifier("hopper_test_refuse_" + queue)) {
        c_.exec(
            "CREATE TABLE IF NOT EXISTS public.hopper_test_refusals "
            "(queue text PRIMARY KEY, sqlstate text NOT NULL, seq text NOT NULL)");
        c_.exec("CREATE SEQUENCE " + seq_);
        c_.exec("INSERT INTO public.hopper_test_refusals VALUES ($1, $2, $3)", queue, sqlstate,
                seq_);
        c_.exec(R"(CREATE OR REPLACE FUNCTION public.hopper_test_refuse() RETURNS trigger
            LANGUAGE plpgsql AS $$
            DECLARE r public.hopper_test_refusals;
            BEGIN
                SELECT * INTO r FROM public.hopper_test_refusals WHERE queue = NEW.queue;
                IF FOUND AND NEW.last_error IS DISTINCT FROM OLD.last_error
                        AND pg_catalog.nextval(r.seq) = 1 THEN
                    RAISE EXCEPTION 'refused once by the test' USING ERRCODE = r.sqlstate;
                END IF;
                RETURN NEW;
            END $$)");
        c_.exec(
            "CREATE OR REPLACE TRIGGER hopper_test_refuse BEFORE UPDATE ON hopper.jobs "
            "FOR EACH ROW EXECUTE FUNCTION public.hopper_test_refuse()");
    }
    ~RefuseOneFailure() {
        try {
            c_.exec("DROP TRIGGER IF EXISTS hopper_test_refuse ON hopper.jobs");
            c_.exec("DELETE FROM public.hopper_test_refusals WHERE seq = $1", seq_);
            c_.exec("DROP SEQUENCE IF EXISTS " + seq_);
        } catch (const std::exception&) {
            // The database goes with the test program.
        }
    }

  private:
    Client& c_;
    std::string seq_;
};

// The plainer-failure fallback is for failures the server refuses for their data (class 22),
// which would be refused again. A serialization failure (40001) says nothing about the handler's
// error: falling back would have recorded the job with the queue's backoff instead of the
// handler's RetryIn. Worker: the report is made again, and the handler's own delay recorded
// (given up, the job would have stayed running until its lease ran out, its error lost).
TEST(WorkerLimits, AFailureRefusedForAnotherReasonDoesNotTakeTheFallback) {
    Client c(conninfo());
    std::string q = unique_queue("not_data");
    QueueOptions qo;
    qo.backoff_base = 1s;
    c.queue_create(q, qo);
    RefuseOneFailure refuse(c, q, "40001");
    WorkerOptions o = quiet(WorkerOptions{}, q);
    std::atomic<int> fallbacks{0}, given_up{0};
    o.log = [&](const std::string& line) {
        if (line.find("its failure was refused") != std::string::npos) ++fallbacks;
        if (line.find("could not report job") != std::string::npos) ++given_up;
    };
    Worker w(o);
    w.on("later", [](JobContext&) { throw RetryIn(std::chrono::hours(1), "try again later"); });
    int64_t id = push_kind(c, q, "later");
    test::Running<Worker> r(w);
    ASSERT_TRUE(eventually([&] { return state_is(c, id, JobState::Scheduled); }, 20s));
    r.stop();
    EXPECT_EQ(fallbacks.load(), 0);
    EXPECT_EQ(given_up.load(), 0);
    JobInfo j = c.job_status(id);
    EXPECT_EQ(j.attempt, 1);
    EXPECT_EQ(j.last_error, "try again later");
    EXPECT_GT(j.run_at, Clock::now() + 50min) << "recorded with the queue's backoff";
}

// Refuses the first `times` history rows of the queue with `sqlstate`: a completion that meets an
// error of the moment.
class RefuseHistory {
  public:
    RefuseHistory(Client& c, const std::string& queue, const std::string& sqlstate, int times)
        : c_(c), seq_(c.connection().escape_identifier("hopper_test_refuse_done_" + queue)) {
        c_.exec(
            "CREATE TABLE IF NOT EXISTS public.hopper_test_done_refusals "
            "(queue text PRIMARY KEY, sqlstate text NOT NULL, seq text NOT NULL, times int NOT "
            "NULL)");
        c_.exec("CREATE SEQUENCE " + seq_);
        c_.exec("INSERT INTO public.hopper_test_done_refusals VALUES ($1, $2, $3, $4)", queue,
                sqlstate, seq_, times);
        c_.exec(R"(CREATE OR REPLACE FUNCTION public.hopper_test_refuse_done() RETURNS trigger
            LANGUAGE plpgsql AS $$
            DECLARE r public.hopper_test_done_refusals;
            BEGIN
                SELECT * INTO r FROM public.hopper_test_done_refusals WHERE queue = NEW.queue;
                IF FOUND AND pg_catalog.nextval(r.seq) <= r.times THEN
                    RAISE EXCEPTION 'refused for the moment by the test' USING ERRCODE = r.sqlstate;
                END IF;
                RETURN NEW;
            END $$)");
        c_.exec(
            "CREATE OR REPLACE TRIGGER hopper_test_refuse_done BEFORE INSERT ON hopper.job_history "
            "FOR EACH ROW EXECUTE FUNCTION public.hopper_test_refuse_done()");
    }
    ~RefuseHistory() {
        try {
            c_.exec("DROP TRIGGER IF EXISTS hopper_test_refuse_done ON hopper.job_history");
            c_.exec("DELETE FROM public.hopper_test_done_refusals WHERE seq = $1", seq_);
            c_.exec("DROP SEQUENCE IF EXISTS " + seq_);
        } catch (const std::exception&) {
            // The database goes with the test program.
        }
    }

  private:
    Client& c_;
    std::string seq_;
};

// A batch of completions that met a deadlock was completed one by one, and a completion that met
// one again was given up: the job stayed running until its lease ran out and ran again, its
// handler's result lost. It is made again, as a handler's own report is.
TEST(WorkerLimits, ACompletionRefusedForTheMomentAfterItsBatchIsMadeAgain) {
    Client c(conninfo());
    std::string q = unique_queue("done_later");
    QueueOptions qo;
    qo.lease = std::chrono::minutes(10);
    c.queue_create(q, qo);
    RefuseHistory refuse(c, q, "40P01", 2);  // the batch, then its first job alone
    WorkerOptions o = quiet(WorkerOptions{}, q);
    o.batch_completions = true;
    std::atomic<int> one_by_one{0}, given_up{0};
    o.log = [&](const std::string& line) {
        if (line.find("one by one instead") != std::string::npos) ++one_by_one;
        if (line.find("could not report job") != std::string::npos) ++given_up;
    };
    Worker w(o);
    w.on("done", [](JobContext& job) { job.set_result(R"({"kept": true})"); });
    int64_t id = push_kind(c, q, "done");
    test::Running<Worker> r(w);
    ASSERT_TRUE(eventually([&] { return state_is(c, id, JobState::Completed); }, 20s))
        << to_string(c.job_status(id).state);
    r.stop();
    EXPECT_EQ(one_by_one.load(), 1);
    EXPECT_EQ(given_up.load(), 0);
    EXPECT_EQ(c.job_status(id).result, R"({"kept": true})");
    EXPECT_EQ(w.stats().completed, 1u);
}

// TakeWorker: the take rolls back, the job is taken again, and its failure is recorded with the
// handler's own delay.
TEST(WorkerLimits, TakeWorkerKeepsTheDelayOfAFailureRefusedForAnotherReason) {
    Client c(conninfo());
    std::string q = unique_queue("take_not_data");
    QueueOptions qo;
    qo.backoff_base = 1s;
    c.queue_create(q, qo);
    RefuseOneFailure refuse(c, q, "40001");
    TakeWorkerOptions o = quiet(TakeWorkerOptions{}, q);
    std::atomic<int> fallbacks{0};
    o.log = [&](const std::string& line) {
        if (line.find("its failure was refused") != std::string::npos) ++fallbacks;
    };
    TakeWorker w(o);
    w.on("later",
         [](const Job&, Client&) { throw RetryIn(std::chrono::hours(1), "try again later"); });
    int64_t id = push_kind(c, q, "later");
    test::Running<TakeWorker> r(w);
    ASSERT_TRUE(eventually([&] { return state_is(c, id, JobState::Scheduled); }, 20s));
    r.stop();
    EXPECT_EQ(fallbacks.load(), 0);
    JobInfo j = c.job_status(id);
    EXPECT_EQ(j.attempt, 1);
    EXPECT_EQ(j.last_error, "try again later");
    EXPECT_GT(j.run_at, Clock::now() + 50min) << "recorded with the queue's backoff";
}

// Duration::max() as shutdown_timeout means "wait for the handlers": now + max overflowed, and
// the running job was released at once.
TEST(WorkerLimits, TheLongestShutdownTimeoutWaitsForRunningJobs) {
    Client c(conninfo());
    std::string q = unique_queue("forever");
    WorkerOptions o = quiet(WorkerOptions{}, q);
    o.shutdown_timeout = Duration::max();
    Worker w(o);
    std::promise<void> go;
    std::shared_future<void> go_f = go.get_future().share();
    std::atomic<bool> started{false};
    w.on_any([&](JobContext&) {
        started = true;
        go_f.wait();
    });
    int64_t id = c.push(q, "{}");
    test::Running<Worker> r(w);
    ASSERT_TRUE(eventually([&] { return started.load(); }, 20s));
    std::thread stopper([&] { w.stop(); });
    std::this_thread::sleep_for(500ms);  // a shutdown that does not wait has released it by now
    go.set_value();
    r.stop();
    stopper.join();
    EXPECT_EQ(c.job_status(id).state, JobState::Completed);
    EXPECT_EQ(w.stats().released, 0u);
    EXPECT_EQ(w.stats().completed, 1u);
}

TEST(WorkerLimits, BothWorkersRefuseTheSameBadOptions) {
    auto refused = [](auto set) {
        WorkerOptions wo = quiet(WorkerOptions{}, "q");
        TakeWorkerOptions to = quiet(TakeWorkerOptions{}, "q");
        set(wo);
        set(to);
        EXPECT_THROW(Worker{wo}, std::invalid_argument);
        EXPECT_THROW(TakeWorker{to}, std::invalid_argument);
    };
    refused([](auto& o) { o.shutdown_timeout = -1ms; });
    refused([](auto& o) { o.poll_interval = -1ms; });
    refused([](auto& o) { o.poll_jitter = std::nan(""); });
    refused([](auto& o) { o.poll_jitter = std::numeric_limits<double>::infinity(); });
    refused([](auto& o) { o.poll_jitter = -0.1; });
    refused([](auto& o) { o.poll_jitter = 1.5; });
    refused([](auto& o) { o.queue.clear(); });
    // What the server refuses in every pull or take: each was retried forever, taking no job.
    refused([](auto& o) { o.queue = "bad queue name!"; });
    refused([](auto& o) { o.queue = "done"; });
    refused([](auto& o) { o.queue = "_q"; });
    refused([](auto& o) { o.queue = std::string(49, 'q'); });
    refused([](auto& o) { o.queue = "caf\xC3\xA9"; });
    refused([](auto& o) { o.name = std::string(129, 'w'); });
    WorkerOptions no_lease = quiet(WorkerOptions{}, "q");
    no_lease.lease = Duration::zero();
    EXPECT_THROW(Worker{no_lease}, std::invalid_argument);
    no_lease.lease = 25h;
    EXPECT_THROW(Worker{no_lease}, std::invalid_argument);
    WorkerOptions no_jobs = quiet(WorkerOptions{}, "q");
    no_jobs.max_jobs = 0;
    EXPECT_THROW(Worker{no_jobs}, std::invalid_argument);
    WorkerOptions at_limits = quiet(WorkerOptions{}, std::string(48, 'q'));
    at_limits.name = std::string(128, 'w');
    at_limits.lease = 24h;
    at_limits.max_jobs = 1;
    EXPECT_NO_THROW(Worker{at_limits});
    TakeWorkerOptions take_at_limits = quiet(TakeWorkerOptions{}, "a0_.:-Z");
    take_at_limits.name = std::string(128, 'w');
    EXPECT_NO_THROW(TakeWorker{take_at_limits});
    WorkerOptions fine = quiet(WorkerOptions{}, "q");
    fine.poll_interval = Duration::zero();  // kept to the least wait, as documented
    fine.poll_jitter = 1;
    fine.shutdown_timeout = Duration::max();
    EXPECT_NO_THROW(Worker{fine});
}

// Commits in this test's database over `d`, as the statistics collector counts them.
int64_t commits_during(Client& c, std::chrono::milliseconds d) {
    auto count = [&] {
        c.exec("SELECT pg_catalog.pg_stat_clear_snapshot()");
        return c
            .exec(
                "SELECT xact_commit FROM pg_catalog.pg_stat_database WHERE datname = "
                "pg_catalog.current_database()")
            .int64(0, 0);
    };
    int64_t before = count();
    std::this_thread::sleep_for(d);
    std::this_thread::sleep_for(1500ms);  // backends report their counts about once a second
    return count() - before;
}

// A listening worker with a poll interval of 0 polled in a loop: 21,779 commits in 2 s.
TEST(WorkerLimits, AListeningWorkerWithAZeroPollIntervalDoesNotSpin) {
    Client c(conninfo());
    std::string q = unique_queue("spin");
    c.queue_create(q);
    WorkerOptions o = quiet(WorkerOptions{}, q);
    o.waiting_pulls = false;
    o.poll_interval = Duration::zero();
    Worker w(o);
    w.on_any([](JobContext&) {});
    test::Running<Worker> r(w);
    std::this_thread::sleep_for(1500ms);
    int64_t commits = commits_during(c, 2000ms);
    int64_t id = c.push(q, "{}");
    EXPECT_TRUE(eventually([&] { return state_is(c, id, JobState::Completed); }, 20s));
    r.stop();
    // About 10 polls a second, and the counting's own few; a spin makes thousands.
    EXPECT_LT(commits, 200);
}

// Signal handling shared by two workers: the first to stop restored the handlers it found (the
// default), so a SIGTERM meant for the second killed the process.
void two_workers_then_sigterm() {
    ::alarm(60);  // a worker that never stops ends the child, failing the test
    Client c(conninfo());
    std::string qa = unique_queue("sig_a"), qb = unique_queue("sig_b");
    WorkerOptions oa = test::slow_polling(quiet(WorkerOptions{}, qa), qa);
    WorkerOptions ob = test::slow_polling(quiet(WorkerOptions{}, qb), qb);
    oa.handle_signals = ob.handle_signals = true;
    Worker a(oa), b(ob);
    a.on_any([](JobContext&) {});
    b.on_any([](JobContext&) {});
    std::thread ta([&] { a.run(); });
    std::thread tb([&] { b.run(); });
    // Both run (and watch for signals) once they wait in the server.
    if (!eventually([&] {
            return test::waiting_in(c, qa, "queue_pull") == 1 &&
                   test::waiting_in(c, qb, "queue_pull") == 1;
        }))
        ::_exit(3);
    a.stop();
    ta.join();
    ::kill(::getpid(), SIGTERM);
    tb.join();  // b stops by the signal
    ::_exit(0);
}

TEST(WorkerLimitsDeathTest, SigtermStillStopsTheSecondWorkerAfterTheFirstStopped) {
    EXPECT_EXIT(two_workers_then_sigterm(), ::testing::ExitedWithCode(0), "");
}

// A signal that stopped a worker stopped every later worker too, even one that does not handle
// signals: the flag was process-wide and never reset.
void a_later_worker_after_a_signal() {
    ::alarm(60);
    Client c(conninfo());
    std::string qa = unique_queue("sig_first"), qb = unique_queue("sig_later");
    WorkerOptions oa = test::slow_polling(quiet(WorkerOptions{}, qa), qa);
    oa.handle_signals = true;
    Worker a(oa);
    a.on_any([](JobContext&) {});
    std::thread ta([&] { a.run(); });
    if (!eventually([&] { return test::waiting_in(c, qa, "queue_pull") == 1; })) ::_exit(3);
    ::kill(::getpid(), SIGTERM);
    ta.join();
    Worker b(quiet(WorkerOptions{}, qb));
    b.on_any([](JobContext&) {});
    int64_t id = c.push(qb, "{}");
    test::Running<Worker> rb(b);
    bool done = eventually([&] { return state_is(c, id, JobState::Completed); }, 20s);
    rb.stop();
    ::_exit(done ? 0 : 4);
}

TEST(WorkerLimitsDeathTest, ASignalThatStoppedOneWorkerDoesNotStopTheNext) {
    EXPECT_EXIT(a_later_worker_after_a_signal(), ::testing::ExitedWithCode(0), "");
}

// A role or database with idle_session_timeout ended the worker's idle connections (its fetch
// connection while the only job ran, the heartbeat's between beats), forfeiting the leases they
// held: every job longer than the timeout was rescued and run again.
TEST(WorkerLimits, IdleSessionTimeoutDoesNotEndTheWorkersSessions) {
    Client c(conninfo());
    std::string q = unique_queue("idle");
    WorkerOptions o = test::slow_polling(quiet(WorkerOptions{}, q), q);
    o.conninfo += " options='-c idle_session_timeout=500'";  // as ALTER ROLE ... SET would
    o.prefetch = 0;
    Worker w(o);
    std::string at_start;
    int64_t gone = -1;  // sessions of the worker's at the job's start, gone by its end
    std::atomic<int> runs{0};
    w.on_any([&](JobContext& job) {
        ++runs;
        Client probe(conninfo());
        at_start = std::string(probe
                                   .exec("SELECT pg_catalog.array_agg(pid)::text FROM "
                                         "pg_catalog.pg_stat_activity WHERE application_name = $1",
                                         q)
                                   .text(0, 0));
        job.wait_for_stop(2s);  // four times the timeout, the job's connections idle
        gone = probe
                   .exec(
                       "SELECT pg_catalog.count(*) FROM pg_catalog.unnest($1::int[]) p WHERE "
                       "p NOT IN (SELECT pid FROM pg_catalog.pg_stat_activity)",
                       at_start)
                   .int64(0, 0);
        job.set_result(R"({"slept": true})");
    });
    int64_t id = c.push(q, "{}");
    test::Running<Worker> r(w);
    ASSERT_TRUE(eventually([&] { return is_final(c.job_status(id).state); }, 30s));
    r.stop();
    JobInfo j = c.job_status(id);
    EXPECT_EQ(j.state, JobState::Completed);
    EXPECT_EQ(j.attempt, 1);
    EXPECT_EQ(runs.load(), 1);
    EXPECT_EQ(gone, 0) << "the server ended some of the worker's sessions " << at_start;
    EXPECT_EQ(w.stats().lost, 0u);
}

// Runs `w` until run() returns or throws, at most `limit`; then stops it. Whether run() ended by
// itself, and what it threw.
template <typename W>
std::pair<bool, std::exception_ptr> run_until_it_ends(W& w, std::chrono::seconds limit) {
    auto ran = std::async(std::launch::async, [&] { w.run(); });
    bool ended = ran.wait_for(limit) == std::future_status::ready;
    if (!ended) w.stop();
    try {
        ran.get();
    } catch (...) {
        return {ended, std::current_exception()};
    }
    return {ended, nullptr};
}

std::string sqlstate_of(const std::exception_ptr& e) {
    try {
        if (e) std::rethrow_exception(e);
    } catch (const Error& err) {
        return err.sqlstate();
    } catch (...) {
        return "not a hopper::Error";
    }
    return "nothing thrown";
}

// A take or pull that the server refuses for good (above, the pull cap hopper.max_pull; a take
// from a queue with limits) was logged and retried forever without taking a job: the worker
// stops, run() throws the server's error, and the jobs stay where they were.
TEST(WorkerLimits, ARefusalForGoodStopsTheWorker) {
    Client c(conninfo());
    auto logged = std::make_shared<std::atomic<int>>(0);
    auto counting = [logged](auto o) {
        o.log = [logged](const std::string&) { ++*logged; };
        o.min_backoff = 10ms;
        o.max_backoff = 20ms;
        return o;
    };
    {
        std::string q = unique_queue("refused");
        int64_t id = c.push(q, "{}");
        TakeWorkerOptions o = counting(quiet(TakeWorkerOptions{}, q));
        o.batch = 1001;
        o.concurrency = 3;
        TakeWorker w(o);
        w.on_any([](const Job&, Client&) {});
        auto [ended, thrown] = run_until_it_ends(w, 30s);
        EXPECT_TRUE(ended) << "retried " << logged->load() << " times";
        EXPECT_EQ(sqlstate_of(thrown), "22023");
        EXPECT_EQ(logged->load(), 1);
        EXPECT_EQ(c.job_status(id).state, JobState::Available);
    }
    {
        std::string q = unique_queue("refused");
        int64_t id = c.push(q, "{}");
        c.exec("SELECT hopper.queue_set_concurrency($1, 1, NULL)", q);
        *logged = 0;
        TakeWorker w(counting(quiet(TakeWorkerOptions{}, q)));
        w.on_any([](const Job&, Client&) {});
        auto [ended, thrown] = run_until_it_ends(w, 30s);
        EXPECT_TRUE(ended) << "retried " << logged->load() << " times";
        EXPECT_EQ(sqlstate_of(thrown), "0A000");
        EXPECT_EQ(c.job_status(id).state, JobState::Available);
    }
    {
        std::string q = unique_queue("refused");
        int64_t id = c.push(q, "{}");
        *logged = 0;
        WorkerOptions o = counting(quiet(WorkerOptions{}, q));
        o.concurrency = 1;
        o.prefetch = 1000;
        o.max_batch = 1001;  // a pull for all 1001 free places is above the cap
        Worker w(o);
        w.on_any([](JobContext&) {});
        auto [ended, thrown] = run_until_it_ends(w, 30s);
        EXPECT_TRUE(ended) << "retried " << logged->load() << " times";
        EXPECT_EQ(sqlstate_of(thrown), "22023");
        EXPECT_EQ(logged->load(), 1);
        EXPECT_EQ(c.job_status(id).state, JobState::Available);
    }
}

}  // namespace
}  // namespace hopper
