// Threads that are joined however the scope that started them ends. A std::thread destroyed while
// still joinable calls std::terminate, so a run() that left by an exception (a thread that could
// not be started, say) would take the whole process down with it.
#pragma once

#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace hopper::internal {

class JoinedThreads {
  public:
    // `wind_down` tells the threads to end; it runs once, before they are joined.
    explicit JoinedThreads(std::function<void()> wind_down) : wind_down_(std::move(wind_down)) {}
    JoinedThreads(const JoinedThreads&) = delete;
    JoinedThreads& operator=(const JoinedThreads&) = delete;
    ~JoinedThreads() { join(); }

    template <typename F>
    void start(F&& f) {
        threads_.emplace_back(std::forward<F>(f));
    }

    void join() noexcept {
        if (wind_down_) {
            try {
                wind_down_();
            } catch (...) {
                // The threads are joined anyway; what they were told before still ends them.
            }
            wind_down_ = nullptr;
        }
        for (auto& t : threads_)
            if (t.joinable()) t.join();
        threads_.clear();
    }

  private:
    std::function<void()> wind_down_;
    std::vector<std::thread> threads_;
};

// Wraps a caller's log function so that a throw from it cannot escape into the runtime's threads
// (where it would end the process) or cut a shutdown short.
inline std::function<void(const std::string&)> guarded_log(
    std::function<void(const std::string&)> log) {
    return [log = std::move(log)](const std::string& msg) noexcept {
        try {
            log(msg);
        } catch (...) {
            // Nothing else can be told about it.
        }
    };
}

}  // namespace hopper::internal
