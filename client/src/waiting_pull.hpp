// The fetch loop's pull that waits in the server for jobs (queue_pull's wait), on a connection of
// its own: the loop's connection stays free for the completions of jobs that finish meanwhile,
// and the pull returns within about a millisecond of the commit that makes a job available,
// without LISTEN/NOTIFY or polling.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hopper/client.hpp"

namespace hopper::internal {

class WaitingPull {
  public:
    explicit WaitingPull(std::string queue) : queue_(std::move(queue)) {}

    bool connected() const { return client_ != nullptr; }
    void attach(std::unique_ptr<Client> client) { client_ = std::move(client); }
    bool in_flight() const { return in_flight_; }

    // Sends the pull (options.n jobs at most, waiting up to options.wait); reconnects first if
    // the connection was lost. Throws what the connection throws.
    void start(const PullOptions& options);

    struct Outcome {
        std::vector<Job> jobs;
        bool filled = false;  // every requested job came: there are probably more
        // Returned empty long before its wait ran out: the server did not wait (a queue with
        // limits), so waiting again would spin.
        bool did_not_wait = false;
    };
    // Waits until the pull returns (its outcome) or `wake_fd` is readable (nullopt).
    std::optional<Outcome> await(int wake_fd);

    // Ends a pull in flight: the jobs it claimed before the cancel reached the server.
    std::vector<Job> cancel();

  private:
    using Steady = std::chrono::steady_clock;
    std::string queue_;
    std::unique_ptr<Client> client_;
    bool in_flight_ = false;
    int requested_ = 0;
    Duration wait_{};
    Steady::time_point sent_;
};

}  // namespace hopper::internal
