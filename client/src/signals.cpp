// SignalWatch; see signals.hpp.
#include "signals.hpp"

#include <atomic>
#include <cerrno>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace hopper::internal {

namespace {

// The handler may only touch lock-free atomics: it reads a fixed table, never a container.
constexpr size_t kMaxWatches = 64;
std::atomic<Wakeup*> g_wakes[kMaxWatches];
std::atomic<uint64_t> g_signals{0};
// Handlers running now, on any thread. A handler that read a watch's slot just before the watch
// ended still writes to that worker's wake-up pipe, which is closed when the worker is destroyed
// (and its descriptor number may then belong to another file): an ending watch waits for them.
std::atomic<int> g_in_handler{0};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<Wakeup*>::is_always_lock_free);
static_assert(std::atomic<int>::is_always_lock_free);

// Guards the installation: how many watches live, and the handlers found before the first.
std::mutex g_install;
size_t g_watches = 0;
struct sigaction g_old_int;
struct sigaction g_old_term;

extern "C" void on_signal(int) {
    // The interrupted code may be about to read errno (after poll() returns EINTR, say): the
    // wake-up's write() must not change it.
    int saved_errno = errno;
    // Counted before the slots are read (sequentially consistent, like the watch's clearing of
    // its slot and its reading of this count; see ~SignalWatch).
    g_in_handler.fetch_add(1);
    g_signals.fetch_add(1);
    for (auto& slot : g_wakes)
        if (Wakeup* w = slot.load()) w->notify();
    g_in_handler.fetch_sub(1);
    errno = saved_errno;
}

}  // namespace

SignalWatch::SignalWatch(Wakeup& wake) {
    std::lock_guard<std::mutex> lock(g_install);
    slot_ = kMaxWatches;
    for (size_t i = 0; i < kMaxWatches && slot_ == kMaxWatches; ++i)
        if (g_wakes[i].load() == nullptr) slot_ = i;
    if (slot_ == kMaxWatches)
        throw std::runtime_error("too many workers handle signals at once in this process");
    seen_ = g_signals.load();
    g_wakes[slot_].store(&wake);
    if (g_watches++ > 0) return;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &g_old_int);
    sigaction(SIGTERM, &sa, &g_old_term);
}

SignalWatch::~SignalWatch() {
    std::lock_guard<std::mutex> lock(g_install);
    g_wakes[slot_].store(nullptr);
    // All in one total order (seq_cst): a handler that counted itself after the slot was cleared
    // reads the slot after that too, and finds it empty (or a later watch's); one that counted
    // itself before is seen in the count until it has finished its write. So once the count is
    // seen at 0, no handler can still reach this watch's wake-up, and the worker may close it.
    // Handlers never block: the wait is short, and one that interrupted this thread has finished
    // before the loop resumes.
    while (g_in_handler.load() != 0) std::this_thread::yield();
    if (--g_watches > 0) return;
    sigaction(SIGINT, &g_old_int, nullptr);
    sigaction(SIGTERM, &g_old_term, nullptr);
}

bool SignalWatch::received() const {
    return g_signals.load() != seen_;
}

uint64_t SignalWatch::count() const {
    return g_signals.load() - seen_;
}

}  // namespace hopper::internal
