// Checks of the options Worker and TakeWorker share, so that both refuse the same values, and the
// rule by which both tell a refusal that will last from one of the moment.
#pragma once

#include <string>

#include "hopper/error.hpp"
#include "hopper/types.hpp"

namespace hopper::internal {

// Throws std::invalid_argument for a queue name the server refuses (1 to 48 characters from
// A-Z a-z 0-9 _ . : -, starting with a letter or digit, not "done"), a worker name longer than
// the server's 128 bytes, a negative poll_interval or shutdown_timeout, or a poll_jitter that is
// not a number between 0 and 1. Each of those would have every pull refused, and retried forever.
void check_worker_options(const std::string& queue, const std::string& name, Duration poll_interval,
                          double poll_jitter, Duration shutdown_timeout);

// Whether the server's refusal of a pull or take will meet the same call every time, whatever
// the wait: the call's own values (class 22, data exception: n above hopper.max_pull, a name too
// long, text that is not UTF-8), the database's objects or rights (class 42: no such function,
// permission denied; 3F000: no hopper schema; not 42P05, a statement name another client of a
// pooled server session took), or a call the queue or session cannot serve
// (0A000: a take from a queue with limits, a waiting pull in a REPEATABLE READ session). Those
// need a person; a lost connection, a deadlock, a timeout, a cancel, a server short of memory or
// connections, a read-only standby pass in time, and are retried.
bool refused_for_good(const Error& e);

}  // namespace hopper::internal
