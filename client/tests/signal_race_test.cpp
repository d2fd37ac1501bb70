// A signal that arrives while a worker ends. The signal handler wakes every watching worker by
// writing to its wake-up pipe; a handler that had read the worker's slot just before run()
// returned went on to write to the pipe after the worker was destroyed: to a closed descriptor,
// or to whatever file reused its number.
//
// To hold a signal handler inside that window, this program interposes write(2) (hence a program
// of its own): a write made by the handler on the trapped thread blocks until the test lets it go.
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include <gtest/gtest.h>

#include "hopper/worker.hpp"
#include "support.hpp"

using namespace std::chrono_literals;
using hopper::test::eventually;

namespace {

thread_local bool t_trapped = false;  // this thread's next write from a signal handler blocks
std::atomic<bool> g_armed{false};
std::atomic<bool> g_blocked{false};
std::atomic<bool> g_release{false};
std::atomic<long> g_result{0};
std::atomic<int> g_errno{0};

long raw_write(int fd, const void* buf, size_t n) {
    return ::syscall(SYS_write, fd, buf, n);
}

}  // namespace

// Async-signal-safe: atomics, a thread-local of the executable, and system calls.
extern "C" ssize_t write(int fd, const void* buf, size_t n) {
    if (!t_trapped || !g_armed.exchange(false)) return raw_write(fd, buf, n);
    g_blocked.store(true);
    for (int i = 0; i < 10000 && !g_release.load(); ++i) {
        struct timespec ms {
            0, 1000000
        };
        ::nanosleep(&ms, nullptr);
    }
    long r = raw_write(fd, buf, n);
    g_errno.store(r < 0 ? errno : 0);
    g_result.store(r);
    return r;
}

namespace hopper {
namespace {

bool sigterm_handled() {
    struct sigaction sa {};
    ::sigaction(SIGTERM, nullptr, &sa);
    return sa.sa_handler != SIG_DFL;
}

TEST(SignalRace, ASignalWakingAWorkerThatEndsDoesNotOutliveIt) {
    WorkerOptions o;
    // No server: the worker retries its connection until it is stopped, watching for signals.
    o.conninfo = "host=/nonexistent-hopper-socket-dir connect_timeout=1";
    o.queue = "signal_race";
    o.handle_signals = true;
    o.log = [](const std::string&) {};
    auto w = std::make_unique<Worker>(o);
    w->on_any([](JobContext&) {});
    std::atomic<bool> returned{false};
    std::thread runner([&] {
        w->run();
        returned.store(true);
    });
    ASSERT_TRUE(eventually(sigterm_handled, 10s));

    // A SIGTERM on a thread of its own, whose handler is held as it writes to the wake-up.
    g_armed.store(true);
    std::thread sender([] {
        t_trapped = true;
        ::pthread_kill(::pthread_self(), SIGTERM);
    });
    bool blocked = eventually([] { return g_blocked.load(); }, 10s);
    w->stop();
    // The worker ends meanwhile; destroyed as soon as run() returns, its pipe's descriptors are
    // free to be reused, as a new pipe does here.
    bool returned_while_held = eventually([&] { return returned.load(); }, 2s);
    int reused[2] = {-1, -1};
    if (returned_while_held) {
        runner.join();
        w.reset();
        ASSERT_EQ(::pipe2(reused, O_NONBLOCK | O_CLOEXEC), 0);
    }
    g_release.store(true);
    sender.join();
    if (!returned_while_held) {
        runner.join();
        w.reset();
    }
    ASSERT_TRUE(blocked) << "the signal handler did not write to the wake-up";
    EXPECT_EQ(g_result.load(), 1) << "the handler's wake-up failed: " << std::strerror(g_errno);
    if (reused[0] >= 0) {
        char c;
        EXPECT_EQ(::read(reused[0], &c, 1), -1) << "the handler wrote into another file";
        ::close(reused[0]);
        ::close(reused[1]);
    }
    EXPECT_FALSE(returned_while_held) << "run() returned while a signal handler still woke it";
}

}  // namespace
}  // namespace hopper
