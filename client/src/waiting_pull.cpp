// The waiting pull of the worker's fetch loop; see waiting_pull.hpp.
#include "waiting_pull.hpp"

namespace hopper::internal {

void WaitingPull::start(const PullOptions& options) {
    if (!client_->connection().ok()) client_->reconnect();
    client_->begin_pull(queue_, options);
    in_flight_ = true;
    requested_ = options.n;
    wait_ = options.wait.value_or(Duration::zero());
    sent_ = Steady::now();
}

std::optional<WaitingPull::Outcome> WaitingPull::await(int wake_fd) {
    try {
        if (!client_->pull_ready()) {
            // The server ends the pull when its wait runs out; the margin only guards against a
            // connection that went silent.
            auto limit = std::chrono::duration_cast<std::chrono::milliseconds>(wait_) +
                         std::chrono::seconds(10);
            client_->connection().wait(limit, wake_fd);
            if (!client_->pull_ready()) return std::nullopt;
        }
        Outcome out;
        out.jobs = client_->finish_pull();
        in_flight_ = false;
        out.filled = static_cast<int>(out.jobs.size()) == requested_;
        out.did_not_wait = out.jobs.empty() && Steady::now() - sent_ < wait_ / 2;
        return out;
    } catch (...) {
        // The statement is over either way (its results were read, or the connection is gone).
        in_flight_ = false;
        throw;
    }
}

std::vector<Job> WaitingPull::cancel() {
    if (!in_flight_) return {};
    in_flight_ = false;
    client_->cancel_pull();
    try {
        return client_->finish_pull();
    } catch (const std::exception&) {
        return {};  // nothing was claimed: the statement failed as a whole
    }
}

}  // namespace hopper::internal
