// SignalWatch; see signals.hpp.
#include "signals.hpp"

#include <atomic>

namespace hopper::internal {

namespace {
std::atomic<bool> g_received{false};
std::atomic<Wakeup*> g_wake{nullptr};

extern "C" void on_signal(int) {
    g_received.store(true);
    if (Wakeup* w = g_wake.load()) w->notify();
}
}  // namespace

SignalWatch::SignalWatch(Wakeup& wake) {
    g_received.store(false);
    g_wake.store(&wake);
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
}

SignalWatch::~SignalWatch() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    g_wake.store(nullptr);
}

bool SignalWatch::received() {
    return g_received.load();
}

}  // namespace hopper::internal
