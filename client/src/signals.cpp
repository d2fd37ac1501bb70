// SignalWatch; see signals.hpp.
#include "signals.hpp"

#include <atomic>
#include <cerrno>
#include <mutex>
#include <stdexcept>

namespace hopper::internal {

namespace {

// The handler may only touch lock-free atomics: it reads a fixed table, never a container.
constexpr size_t kMaxWatches = 64;
std::atomic<Wakeup*> g_wakes[kMaxWatches];
std::atomic<uint64_t> g_signals{0};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<Wakeup*>::is_always_lock_free);

// Guards the installation: how many watches live, and the handlers found before the first.
std::mutex g_install;
size_t g_watches = 0;
struct sigaction g_old_int;
struct sigaction g_old_term;

extern "C" void on_signal(int) {
    // The interrupted code may be about to read errno (after poll() returns EINTR, say): the
    // wake-up's write() must not change it.
    int saved_errno = errno;
    g_signals.fetch_add(1);
    for (auto& slot : g_wakes)
        if (Wakeup* w = slot.load()) w->notify();
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
    if (--g_watches > 0) return;
    sigaction(SIGINT, &g_old_int, nullptr);
    sigaction(SIGTERM, &g_old_term, nullptr);
}

bool SignalWatch::received() const {
    return g_signals.load() != seen_;
}

}  // namespace hopper::internal
