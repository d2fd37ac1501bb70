// Heartbeats, progress and releases on the control connection; see heartbeat.hpp.
#include "heartbeat.hpp"

#include <algorithm>
#include <iterator>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "worker_client.hpp"

namespace hopper::internal {

namespace {
using Steady = std::chrono::steady_clock;
constexpr auto kTick = std::chrono::milliseconds(100);
constexpr Duration kShortestInterval = std::chrono::milliseconds(100);
}  // namespace

Heartbeat::Heartbeat(std::string conninfo, std::optional<Duration> lease, Duration min_backoff,
                     Duration max_backoff, Log log)
    : conninfo_(std::move(conninfo)),
      lease_(lease),
      log_(std::move(log)),
      backoff_(min_backoff, max_backoff) {
    stopper_ = std::thread([this] { run_stops(); });
    try {
        thread_ = std::thread([this] { loop(); });
    } catch (...) {
        end_stops();  // a joinable thread destroyed would end the process
        throw;
    }
}

Heartbeat::~Heartbeat() {
    {
        std::lock_guard<std::mutex> lock(m_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    end_stops();
}

void Heartbeat::end_stops() {
    // The callbacks queued until now still run: a handler may be waiting for one.
    {
        std::lock_guard<std::mutex> lock(stops_m_);
        stops_end_ = true;
    }
    stops_cv_.notify_all();
    stopper_.join();
}

void Heartbeat::run_stops() {
    std::unique_lock<std::mutex> lock(stops_m_);
    while (true) {
        stops_cv_.wait(lock, [&] { return stops_end_ || !stops_.empty(); });
        if (stops_.empty()) return;
        Stop stop = std::move(stops_.front());
        stops_.pop_front();
        lock.unlock();
        try {
            stop.fn();
        } catch (const std::exception& ex) {
            log_(fmt::format("on_stop callback of job {} threw: {}", stop.id, ex.what()));
        } catch (...) {
            log_(fmt::format("on_stop callback of job {} threw", stop.id));
        }
        lock.lock();
    }
}

Client& Heartbeat::control() {
    if (!control_) {
        auto client = worker_client(conninfo_);
        // A heartbeat or progress report waits for its job's row while the job's own handler
        // holds it (inside fail_with or complete_with, say), and this one connection serves every
        // job: the others' leases would run out meanwhile, and a report made from inside that
        // handler's transaction would wait for it forever. Set at each connect, as the first
        // statement may be a report, and a connection lost meanwhile comes back by itself.
        // Behind a pooler a session setting would stay on whichever server session ran it, for
        // its next client, and not follow this connection to the next: limited() sets it there.
        if (!client->connection().pooled())
            client->connection().on_connect("SET lock_timeout = '200ms'");
        control_ = std::move(client);
    }
    return *control_;
}

template <typename F>
auto Heartbeat::limited(F&& f) -> decltype(f(std::declval<Client&>())) {
    Client& c = control();
    if (!c.connection().pooled()) return f(c);
    Transaction tx(c);
    c.exec("SET LOCAL lock_timeout = '200ms'");
    auto r = f(c);
    tx.commit();
    return r;
}

Duration heartbeat_interval(const Job& job, std::optional<Duration> lease) {
    // lease/3: two heartbeats can fail in a row before the lease runs out. Without a lease of the
    // worker's own, what the pull left of the queue's, which needs no clock of this machine:
    // lease_until less this machine's time was off by however far its clock is from the server's,
    // and a clock 40 s behind gave a 10 s lease its first heartbeat after 17 s, every lease lost.
    return std::clamp<Duration>((lease ? *lease : job.lease_left) / 3, kShortestInterval,
                                std::chrono::minutes(10));
}

Duration heartbeat_extension(const Job& job, std::optional<Duration> lease) {
    return std::max<Duration>(lease ? *lease : job.lease_left, 3 * kShortestInterval);
}

void Heartbeat::hold(const Job& job) {
    Duration interval = heartbeat_interval(job, lease_);
    Duration extension = heartbeat_extension(job, lease_);
    std::lock_guard<std::mutex> lock(m_);
    entries_[{job.id, job.lease_token}] =
        Entry{nullptr, false, interval, extension, Steady::now() + interval};
}

StopReason Heartbeat::add(const Job& job, JobContext& ctx) {
    Duration interval = heartbeat_interval(job, lease_);
    Duration extension = heartbeat_extension(job, lease_);
    std::lock_guard<std::mutex> lock(m_);
    const Run run{job.id, job.lease_token};
    auto gone = gone_.find(run);
    if (gone != gone_.end()) {
        StopReason reason = gone->second;
        gone_.erase(gone);
        return reason;
    }
    auto it = entries_.find(run);
    if (it != entries_.end()) {
        // Held until now: keep its beat schedule, which the lease was extended by.
        it->second.ctx = &ctx;
        return StopReason::None;
    }
    entries_[run] = Entry{&ctx, false, interval, extension, Steady::now() + interval};
    return StopReason::None;
}

void Heartbeat::finish(const Job& job) {
    std::lock_guard<std::mutex> lock(m_);
    auto it = entries_.find({job.id, job.lease_token});
    if (it == entries_.end()) return;  // lost meanwhile: nothing left to keep
    it->second.ctx = nullptr;
    it->second.finishing = true;
}

void Heartbeat::remove(const Job& job) {
    std::lock_guard<std::mutex> lock(m_);
    entries_.erase({job.id, job.lease_token});
    gone_.erase({job.id, job.lease_token});
}

void Heartbeat::remove(const std::vector<int64_t>& ids, const std::vector<int64_t>& tokens) {
    std::lock_guard<std::mutex> lock(m_);
    for (size_t i = 0; i < ids.size() && i < tokens.size(); ++i) {
        entries_.erase({ids[i], tokens[i]});
        gone_.erase({ids[i], tokens[i]});
    }
}

void Heartbeat::raise_stop(std::map<Run, Entry>::iterator it, StopReason reason) {
    // The flag now; the callbacks (the user's code) on the stopper thread, since m_ is held here
    // and this is the thread that beats for every job.
    auto callbacks = it->second.ctx->raise_stop(reason);
    if (callbacks.empty()) return;
    {
        std::lock_guard<std::mutex> lock(stops_m_);
        for (auto& fn : callbacks) stops_.push_back({it->first.first, std::move(fn)});
    }
    stops_cv_.notify_one();
}

void Heartbeat::drop(std::map<Run, Entry>::iterator it, StopReason reason) {
    if (it->second.ctx) {
        raise_stop(it, reason);
    } else if (!it->second.finishing) {
        gone_[it->first] = reason;
    }
    entries_.erase(it);
}

bool Heartbeat::progress(int64_t id, int64_t token, double fraction,
                         const std::optional<std::string>& detail) {
    std::lock_guard<std::mutex> lock(control_m_);
    try {
        return limited([&](Client& c) { return c.progress(id, token, fraction, detail); });
    } catch (const Error& ex) {
        // A progress report is not worth failing the job for; the heartbeat notices real loss.
        // Nor is a row held meanwhile (the control connection's lock_timeout): by the job's own
        // handler, inside fail_with say, whose transaction this report would wait for forever.
        if (dynamic_cast<const ConnectionError*>(&ex) == nullptr &&
            ex.sqlstate() != sqlstate::kLockNotAvailable)
            throw;
        log_(fmt::format("progress of job {} not recorded: {}", id, ex.what()));
        return true;
    }
}

Heartbeat::Stopped Heartbeat::stop_all(StopReason reason) {
    std::lock_guard<std::mutex> lock(m_);
    Stopped out;
    for (auto it = entries_.begin(); it != entries_.end();) {
        auto next = std::next(it);
        if (it->second.ctx) {
            // Its handler may still be at work: the job stays ours, and beaten, until it returns.
            out.running.push_back(it->first.first);
            raise_stop(it, reason);
        } else if (!it->second.finishing) {
            try {
                std::lock_guard<std::mutex> c(control_m_);
                if (limited(
                        [&](Client& cl) { return cl.release(it->first.first, it->first.second); }))
                    ++out.released;
            } catch (const std::exception& ex) {
                // The lease runs out by itself (or the reaper sees the connection gone).
                log_(fmt::format("could not release job {}: {}", it->first.first, ex.what()));
            }
            drop(it, reason);
        }
        it = next;
    }
    return out;
}

void Heartbeat::loop() {
    std::unique_lock<std::mutex> lock(m_);
    while (!stop_) {
        cv_.wait_for(lock, kTick, [&] { return stop_; });
        if (stop_) break;
        lock.unlock();
        beat_due();
        lock.lock();
    }
}

void Heartbeat::beat_due() {
    struct Due {
        int64_t id;
        int64_t token;
        Duration extension;
    };
    std::vector<Due> due;
    auto now = Steady::now();
    {
        // Before the due jobs are chosen: choosing moves each an interval on, which inside the
        // back-off would undo their retry right after it, and a short outage would cost leases.
        std::lock_guard<std::mutex> c(control_m_);
        if (now < retry_after_) return;
    }
    {
        std::lock_guard<std::mutex> lock(m_);
        for (auto& [run, e] : entries_)
            if (e.next <= now) {
                due.push_back({run.first, run.second, e.extension});
                e.next = now + e.interval;
            }
    }
    if (due.empty()) return;

    std::vector<std::pair<Run, StopReason>> lost;
    bool failed = false;
    {
        std::lock_guard<std::mutex> c(control_m_);
        try {
            for (const auto& d : due) {
                try {
                    if (limited(
                            [&](Client& cl) { return cl.heartbeat(d.id, d.token, d.extension); }))
                        continue;
                    // Tell "an operator cancelled it" from "someone else has it now".
                    JobState st = control().job_status(d.id).state;
                    lost.emplace_back(Run{d.id, d.token}, st == JobState::Cancelled
                                                              ? StopReason::Cancelled
                                                              : StopReason::Lost);
                } catch (const Error& e) {
                    // Its row is held (see control()), by its own handler's transaction most
                    // likely: beaten at the next turn, the others now.
                    if (e.sqlstate() == sqlstate::kLockNotAvailable) continue;
                    // The job is gone (its queue dropped, or finished elsewhere and not kept):
                    // lost, like any job that is no longer ours. Taken for a connection error,
                    // it stopped the heartbeats of every job after it, whose leases then ran out.
                    if (e.sqlstate() != sqlstate::kNoData) throw;
                    lost.emplace_back(Run{d.id, d.token}, StopReason::Lost);
                }
            }
            backoff_.reset();
        } catch (const std::exception& ex) {
            Duration wait = backoff_.next();
            retry_after_ = Steady::now() + wait;
            failed = true;
            log_(fmt::format("heartbeat failed (retrying in {} ms): {}", wait.count() / 1000,
                             ex.what()));
        }
    }
    if (failed) {
        // Retry these right after the back-off rather than a whole interval later.
        std::lock_guard<std::mutex> lock(m_);
        for (const auto& d : due) {
            auto it = entries_.find({d.id, d.token});
            if (it != entries_.end()) it->second.next = now;
        }
    }
    if (lost.empty()) return;
    std::lock_guard<std::mutex> lock(m_);
    for (const auto& [run, reason] : lost) {
        auto it = entries_.find(run);
        if (it == entries_.end()) continue;
        if (it->second.finishing) {
            // Its report finds the job gone too, and says so.
            entries_.erase(it);
            continue;
        }
        log_(fmt::format("job {} {}: {}", run.first,
                         reason == StopReason::Cancelled ? "was cancelled" : "lease was lost",
                         it->second.ctx ? "stopping its handler" : "it will not be started"));
        drop(it, reason);
    }
}

}  // namespace hopper::internal
