// Shared test plumbing: a database of the suite's own with the extension created in it (dropped
// when the test program ends), and polling helpers that tolerate a slow, busy machine.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <thread>

#include "hopper/client.hpp"

namespace hopper::test {

// The conninfo of this test program's database ("dbname=hopper_gtest_<suite>_<pid>"); the server
// comes from the PG* environment that the test runner exports.
const std::string& conninfo();

// A queue name unique within this test program run.
std::string unique_queue(const std::string& prefix);

// Polls `cond` every 20 ms until it holds or `timeout` passes; returns its last value.
bool eventually(const std::function<bool()>& cond,
                std::chrono::milliseconds timeout = std::chrono::seconds(30));

// The conninfo of this program's database for connections named `application_name`, so that a
// test can find its worker's sessions in pg_stat_activity.
std::string named_conninfo(const std::string& application_name);

// Worker options (hopper::WorkerOptions or hopper::TakeWorkerOptions) whose sessions carry the
// queue's name and which would not poll within a test: only a wait in the server (or a NOTIFY)
// can start their jobs in time.
template <typename Options>
Options slow_polling(Options o, const std::string& queue) {
    o.conninfo = named_conninfo(queue);
    o.poll_interval = std::chrono::seconds(20);
    o.poll_jitter = 0;
    return o;
}

// Statements of the sessions named `application_name` that sleep in the server inside `function`
// (a waiting queue_pull or queue_take).
int64_t waiting_in(Client& c, const std::string& application_name, const std::string& function);

// Cancels the one waiting statement of `function` in the sessions named `application_name`, as an
// operator's pg_cancel_backend would, and tells whether the same session waits again within 30 s.
bool waits_again_after_cancel(Client& c, const std::string& application_name,
                              const std::string& function);

// Sets the environment variable HOPPER_POOLER (read at each connect) for the scope of the
// object, then restores it. Set it while no other thread connects: setenv is not thread-safe.
class PoolerSetting {
  public:
    explicit PoolerSetting(const char* value);
    ~PoolerSetting();
    PoolerSetting(const PoolerSetting&) = delete;
    PoolerSetting& operator=(const PoolerSetting&) = delete;

  private:
    std::optional<std::string> before_;
};

// Runs a worker (hopper::Worker or hopper::TakeWorker) on a thread for the scope of the object.
template <typename W>
class Running {
  public:
    explicit Running(W& w) : w_(w), t_([this] { w_.run(); }) {}
    ~Running() { stop(); }
    void stop() {
        if (!t_.joinable()) return;
        w_.stop();
        t_.join();
    }

  private:
    W& w_;
    std::thread t_;
};

// Registers the database environment with GoogleTest; call from main() of each test program.
void register_database(const std::string& suite);

}  // namespace hopper::test
