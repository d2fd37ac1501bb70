// JobContext: the stop flag a handler polls or waits on, and completion inside its transaction.
#include <condition_variable>
#include <mutex>
#include <vector>

#include "deadline.hpp"
#include "hopper/worker.hpp"

namespace hopper {

struct JobContext::State {
    std::mutex m;
    std::condition_variable cv;
    StopReason reason = StopReason::None;
    std::vector<std::function<void(StopReason)>> on_stop;
};

std::string_view to_string(StopReason r) {
    switch (r) {
        case StopReason::None:
            return "none";
        case StopReason::Lost:
            return "lost";
        case StopReason::Cancelled:
            return "cancelled";
        case StopReason::Shutdown:
            return "shutdown";
    }
    return "unknown";
}

JobContext::JobContext(const Job& job, Client& client, ProgressSink report_progress)
    : job_(job),
      client_(client),
      report_progress_(std::move(report_progress)),
      state_(std::make_shared<State>()) {}

bool JobContext::progress(double fraction, const std::optional<std::string>& detail) {
    if (stop_requested()) return false;
    bool held = report_progress_ ? report_progress_(fraction, detail)
                                 : client_.progress(job_.id, job_.lease_token, fraction, detail);
    return held;
}

StopReason JobContext::stop_reason() const {
    std::lock_guard<std::mutex> lock(state_->m);
    return state_->reason;
}

bool JobContext::wait_for_stop(Duration timeout) {
    std::unique_lock<std::mutex> lock(state_->m);
    return state_->cv.wait_until(lock, internal::deadline_after(timeout),
                                 [&] { return state_->reason != StopReason::None; });
}

void JobContext::on_stop(std::function<void(StopReason)> fn) {
    std::unique_lock<std::mutex> lock(state_->m);
    if (state_->reason == StopReason::None) {
        state_->on_stop.push_back(std::move(fn));
        return;
    }
    StopReason r = state_->reason;
    lock.unlock();
    fn(r);
}

void JobContext::request_stop(StopReason reason) {
    // Outside the lock, so a callback may look at the context.
    for (auto& fn : raise_stop(reason)) fn();
}

std::vector<std::function<void()>> JobContext::raise_stop(StopReason reason) {
    std::vector<std::function<void(StopReason)>> callbacks;
    {
        std::lock_guard<std::mutex> lock(state_->m);
        if (state_->reason != StopReason::None || reason == StopReason::None) return {};
        state_->reason = reason;
        callbacks.swap(state_->on_stop);
    }
    state_->cv.notify_all();
    std::vector<std::function<void()>> bound;
    bound.reserve(callbacks.size());
    for (auto& fn : callbacks) bound.emplace_back([fn = std::move(fn), reason] { fn(reason); });
    return bound;
}

bool JobContext::complete_with(const std::function<void(Client&)>& in_transaction,
                               const std::optional<std::string>& result) {
    Transaction tx(client_);
    if (in_transaction) in_transaction(client_);
    if (!client_.complete(job_.id, job_.lease_token, result ? result : result_)) {
        tx.rollback();
        return false;
    }
    tx.commit();
    finished_ = Finished::Completed;
    return true;
}

bool JobContext::release() {
    if (!client_.release(job_.id, job_.lease_token)) return false;
    finished_ = Finished::Released;
    return true;
}

std::optional<JobState> JobContext::fail_with(
    const std::string& error, const FailOptions& options,
    const std::function<void(Client&, JobState)>& in_transaction) {
    Transaction tx(client_);
    // Failing first tells the caller's SQL what became of the job; nothing is visible to anyone
    // else until the commit, so the order inside the transaction does not matter.
    std::optional<JobState> state = client_.fail(job_.id, job_.lease_token, error, options);
    if (!state) {
        tx.rollback();
        return std::nullopt;
    }
    if (in_transaction) in_transaction(client_, *state);
    tx.commit();
    finished_ = Finished::Failed;
    return state;
}

}  // namespace hopper
