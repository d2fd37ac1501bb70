// The values the queue functions take and return, as C++ types: JSON travels as its text, NULLs as
// std::optional, times as std::chrono.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hopper {

using Clock = std::chrono::system_clock;
using TimePoint = Clock::time_point;
using Duration = std::chrono::microseconds;

// A job's state as job_status reports it; Scheduled is an available job whose run_at is ahead.
enum class JobState { Available, Scheduled, Running, Completed, Dead, Cancelled };

std::string_view to_string(JobState s);
// Throws std::invalid_argument for a name that is not a state.
JobState parse_job_state(std::string_view s);
// Completed, dead and cancelled jobs never change again (unless retried by an operator).
inline bool is_final(JobState s) {
    return s == JobState::Completed || s == JobState::Dead || s == JobState::Cancelled;
}

// queue_create settings; unset fields take the server defaults.
struct QueueOptions {
    std::optional<int> max_attempts;
    std::optional<Duration> lease;
    std::optional<Duration> backoff_base;
    std::optional<Duration> backoff_cap;
    std::optional<Duration> retention;
    std::optional<double> jitter;
};

struct PushOptions {
    std::optional<TimePoint> run_at;  // unset: now
    int priority = 0;                 // smaller runs first
    std::optional<std::string> kind;
    std::optional<int> max_attempts;  // unset: the queue's
    std::optional<std::string> dedup_key;
    std::optional<std::string> concurrency_key;
    // With dedup_key: a job with the key that finished after being created within this window
    // still answers the push (unset: only unfinished jobs do).
    std::optional<Duration> dedup_window;
};

// Scalar options apply to every job of the batch; the key vectors, when not empty, hold one entry
// per payload (std::nullopt for "no key").
struct BatchPushOptions {
    std::optional<TimePoint> run_at;
    int priority = 0;
    std::optional<std::string> kind;
    std::optional<int> max_attempts;
    std::vector<std::optional<std::string>> dedup_keys;
    std::vector<std::optional<std::string>> concurrency_keys;
    std::optional<Duration> dedup_window;  // as PushOptions::dedup_window, for every keyed job
};

struct PullOptions {
    int n = 1;
    std::optional<Duration> lease;  // unset: the queue's lease
    std::optional<std::string> worker;
    std::vector<std::string> kinds;  // empty: any kind
    std::optional<TimePoint> at;     // pretend "now" is this (tests)
    // Ties the lease to this connection too: if it dies, the job is rescued at once.
    bool session_bound = false;
    // With none due, wait up to this long for one to be pushed (queue_pull's wait): the call
    // returns as soon as a job is claimed, or empty when the wait runs out. Unset: at once.
    // Client::pull only: complete_many_and_pull never waits, as its completions would stay
    // uncommitted meanwhile.
    std::optional<Duration> wait;
};

// Client::take: the pull's choices, without a lease.
struct TakeOptions {
    int n = 1;
    std::optional<std::string> worker;
    std::vector<std::string> kinds;  // empty: any kind
    std::optional<TimePoint> at;     // pretend "now" is this (tests)
    // With none due, wait up to this long for one to be pushed (queue_take's wait). Unset: at once.
    std::optional<Duration> wait;
};

struct FailOptions {
    std::optional<Duration> retry_in;  // unset: the queue's exponential backoff
    bool permanent = false;            // straight to dead, no more attempts
};

// One leased job, as queue_pull returns it.
struct Job {
    int64_t id = 0;
    std::string queue;
    std::optional<std::string> kind;
    std::string payload;  // JSON object text
    int attempt = 0;
    int64_t lease_token = 0;
    TimePoint lease_until;
    TimePoint run_at;
    TimePoint created_at;
    // How long the lease had to run as the pull returned the job, by the server's clock alone
    // (lease_until less the server's time then). Unlike lease_until, it can be counted down on
    // this machine's clocks however far its wall clock is from the server's. Zero for a taken job.
    Duration lease_left{};
};

// Everything job_status knows about a job.
struct JobInfo {
    int64_t id = 0;
    std::string queue;
    std::optional<std::string> kind;
    JobState state = JobState::Available;
    int attempt = 0;
    int max_attempts = 0;
    int priority = 0;
    TimePoint run_at;
    TimePoint created_at;
    std::optional<TimePoint> started_at;
    std::optional<TimePoint> finished_at;
    std::optional<std::string> worker;
    std::optional<std::string> last_error;
    std::optional<std::string> errors;  // JSON array text
    std::optional<std::string> result;  // JSON text
    std::optional<double> progress;
    std::optional<std::string> progress_detail;  // JSON text
    std::string payload;                         // JSON object text
};

// One queue's counts, as queue_stats returns them.
struct QueueStat {
    std::string queue;
    int64_t available = 0;
    int64_t scheduled = 0;
    int64_t running = 0;
    int64_t completed = 0;
    int64_t dead = 0;
    int64_t cancelled = 0;
    std::optional<Duration> oldest_available_age;
    bool paused = false;
};

// Whether `name` is a queue name the server accepts: 1 to 48 characters from A-Z a-z 0-9 _ . : -,
// starting with a letter or digit ("done" aside, which hopper:done reserves).
bool is_queue_name(std::string_view name);

}  // namespace hopper
