// Back-off and jitter; see backoff.hpp.
#include "backoff.hpp"

#include <algorithm>

namespace hopper::internal {

namespace {
std::mt19937_64& thread_rng() {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    return rng;
}
}  // namespace

Backoff::Backoff(Duration min, Duration max)
    : min_(std::max(min, Duration(1))),
      max_(std::max(max, min_)),
      current_(min_),
      rng_(std::random_device{}()) {}

Duration Backoff::next() {
    std::uniform_int_distribution<int64_t> pick(min_.count(), current_.count());
    Duration d(pick(rng_));
    current_ = current_ > max_ / 2 ? max_ : current_ * 2;  // doubling past max_ would overflow
    return d;
}

void Backoff::reset() {
    current_ = min_;
}

Duration jittered(Duration d, double jitter) {
    jitter = std::clamp(jitter, 0.0, 1.0);
    std::uniform_real_distribution<double> f(1.0 - jitter, 1.0 + jitter);
    double us = static_cast<double>(d.count()) * f(thread_rng());
    // A huge d (Duration::max(): "hardly ever") times 1 + jitter is past int64_t.
    if (us >= static_cast<double>(Duration::max().count())) return Duration::max();
    return Duration(static_cast<int64_t>(us));
}

Duration server_wait(Duration poll_interval, double jitter) {
    return std::clamp<Duration>(jittered(poll_interval, jitter), std::chrono::milliseconds(100),
                                std::chrono::seconds(30));
}

Duration listen_poll(Duration poll_interval, double jitter) {
    return std::max<Duration>(jittered(poll_interval, jitter), std::chrono::milliseconds(100));
}

}  // namespace hopper::internal
