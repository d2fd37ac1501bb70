// Reading and checking SQL arguments. Every check raises a PgError with a real SQLSTATE and a
// message that names the argument and says what is allowed, before anything is changed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "hopper/boundary.hpp"

extern "C" {
#include "datatype/timestamp.h"
#include "utils/jsonb.h"
}

namespace hopper::args {

constexpr int kMaxQueueName = 48;  // leaves room for the "hopper:" NOTIFY channel prefix (63 max)
constexpr int kMaxKind = 128;
constexpr int kMaxKey = 512;  // dedup and concurrency keys
constexpr int kMaxWorker = 128;
constexpr int64_t kMaxLeaseUs = int64_t(24) * 3600 * 1000000;  // 1 day; heartbeats extend it
constexpr int64_t kMaxWaitUs = int64_t(3600) * 1000000;        // a waiting pull holds a snapshot
constexpr int64_t kMaxRunAtAheadUs = int64_t(10) * 366 * 24 * 3600 * 1000000;  // ~10 years
constexpr int64_t kMaxRunAtBehindUs = int64_t(366) * 24 * 3600 * 1000000;      // ~1 year

bool is_null(FunctionCallInfo fcinfo, int n);

// A pull's kinds filter: true when it is NULL (no filter). Matched with `kind = ANY(...)`, which
// would flatten a two-dimensional array without a word, so more than one dimension is 2202E, as
// for every other array argument.
bool kinds_absent(FunctionCallInfo fcinfo, int n);

// The first max_bytes bytes of s, shortened so as not to cut a character of the database's
// encoding in half: error messages quote user text, and half a character is invalid UTF-8.
std::string clip(const std::string& s, size_t max_bytes);

// Queue names: 1-48 characters from [A-Za-z0-9_.:-], starting with a letter or digit; not "done",
// whose channel hopper:done carries finished jobs.
std::string queue_name(FunctionCallInfo fcinfo, int n, const char* argname = "queue");
void check_queue_name(const std::string& q, const char* argname = "queue");
// The same test, answered rather than raised.
bool is_queue_name(const std::string& q);

// Optional text with a length limit; empty strings are rejected (NULL means "none").
std::optional<std::string> optional_text(FunctionCallInfo fcinfo, int n, const char* argname,
                                         int max_len);
// The same for text that must be given: NULL is 22004, empty 22023.
std::string required_text(FunctionCallInfo fcinfo, int n, const char* argname, int max_len);

// A failure's error text, kept on the job (last_error) and in its last 20 errors. Clipped to
// kMaxErrorBytes with a note of its full length: a stack trace is worth keeping, a 15 MB one
// repeated 20 times passed jsonb's size limit and made the job impossible to fail or rescue.
constexpr size_t kMaxErrorBytes = 16384;
std::optional<std::string> error_text(FunctionCallInfo fcinfo, int n);

int64_t job_id(FunctionCallInfo fcinfo, int n);
// How many jobs one pull or take may return: 1 to hopper.max_pull.
int32_t pull_size(FunctionCallInfo fcinfo, int n);
int64_t lease_token(FunctionCallInfo fcinfo, int n);

// A payload: a JSON object no larger than hopper.max_payload_bytes. Returns the datum (detoasted).
Datum payload(FunctionCallInfo fcinfo, int n, const char* argname = "payload");
void check_payload(Jsonb* jb, const char* argname);
// The size limit alone, for a payload's size as stored uncompressed (VARSIZE of the detoasted
// value).
void check_payload_size(size_t size, const char* argname);

// An interval converted to microseconds, which must lie in (min_us, max_us]; NULL -> nullopt.
// Its months, days and time must not differ in sign: '-1 mon 30 days 12 hours' is 12 hours at
// 30 days a month, but a calendar month ahead of a 31-day month makes it negative.
std::optional<int64_t> interval_us(FunctionCallInfo fcinfo, int n, const char* argname,
                                   int64_t min_us, int64_t max_us, bool allow_zero = false);

// A duration (a lease, a retry delay, a queue setting): interval_us's check, and the interval of
// that fixed length in microseconds alone, with no days or months. A timestamptz plus an interval
// adds days and months on the calendar of the session's TimeZone, so that '1 day' from the day
// before a DST change lasted 23 or 25 hours, past the day a lease may last; checked as fixed
// lengths, durations are added as such: a day is 24 hours, a month 30 days, in any time zone.
// The queues' settings are stored so (hopper.queues' checks require it), and SQL adds them as they
// are.
struct Duration {
    int64_t us;
    Interval interval;  // {us, 0 days, 0 months}
};
std::optional<Duration> duration(FunctionCallInfo fcinfo, int n, const char* argname,
                                 int64_t min_us, int64_t max_us, bool allow_zero = false);
// The duration as a statement parameter, NULL when absent; it points into d, which must outlive
// the statement's run.
inline Datum duration_datum(const std::optional<Duration>& d) {
    return d ? PointerGetDatum(&d->interval) : (Datum)0;
}

// A point in time a function acts at (pull's and schedule_run_due's `at`, cron_next's `after`):
// NULL -> the transaction's start; infinity -> 22023 naming argname.
TimestampTz clock(FunctionCallInfo fcinfo, int n, const char* argname);

// The clock of the leases a claim at `at` (its `at`, a clock() above) hands out and of the leases
// it finds run out: the real time for the default `at` (the transaction's start, which may be
// long past); `at` for a superuser; anyone else's stops at the real time. A pull dated ahead
// then neither takes over a live lease nor gets one that outlasts the cap on a lease ("at" is for
// tests).
// Never later than kLastLeaseStart.
TimestampTz lease_clock(TimestampTz at);
// The last instant a lease of up to a day may start from and end within timestamptz's range.
constexpr TimestampTz kLastLeaseStart = END_TIMESTAMP - kMaxLeaseUs - 1;
// A superuser's `at` from which no lease of up to a day would end within timestamptz's range
// (294276-12-31 or later) is 22023 naming `at`: queue_pull checks its `at` so before it changes
// anything. A take leases nothing, and takes any finite `at`.
void check_lease_at(TimestampTz at);

// run_at: NULL -> nullopt (now); finite and within the allowed window around now.
std::optional<TimestampTz> run_at(FunctionCallInfo fcinfo, int n);

int16_t priority(FunctionCallInfo fcinfo, int n);
std::optional<int32_t> max_attempts(FunctionCallInfo fcinfo, int n);

}  // namespace hopper::args
