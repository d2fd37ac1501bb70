// LISTEN/NOTIFY channels: "hopper:<queue>" when jobs become available there, "hopper:done" with
// {"id", "queue", "state"} when a job of a queue that asked for it (queues.notify_done) finishes
// (completed, dead or cancelled). PostgreSQL delivers notifications at commit and folds identical
// ones of one transaction into one.
//
// A transaction that sends a NOTIFY holds a database-wide lock across its commit's WAL flush, so
// notifying commits are serialized. Pushes therefore hand their wake-up to the reaper when one
// runs (queue_pushed): their commits only set its latch, and the reaper sends one coalesced
// NOTIFY per queue from a transaction that does not wait for the disk (see reaper_relay.hpp).
#pragma once

#include <cstdint>
#include <string>

extern "C" {
#include "postgres.h"
#include "datatype/timestamp.h"
}

namespace hopper::notify {

// Jobs became available in queue (release, retry, resume, rescues, the reaper's pass): when the
// transaction commits, every pull waiting on the queue is woken (pull_wait.hpp) and the listeners
// told, as a push's are (queue_pushed: relayed by the reaper where one runs, nothing for a
// prepared transaction or a rolled-back subtransaction). No NOTIFY when hopper.notify is off; the
// waiting pulls are woken all the same.
void queue_ready(const std::string& queue);

// The NOTIFY alone: the reaper's relay, whose pushes woke the waiting pulls at their own commit.
// None for a name no queue may have (args::is_queue_name): job rows written by hand may carry
// one, and the transactions that put such jobs back must not fail over it.
void tell_listeners(const std::string& queue);

// The wake-up for `jobs` jobs a push inserted into `queue`, the earliest due at run_at. Decided at
// commit, and only if one is due then (the reaper announces the others when they fall due): the
// commit wakes one waiting pull per job, and the NOTIFY is relayed by this database's reaper with
// hopper.notify_relay on if one is known to run (the commit sets its latch and takes no NOTIFY
// lock), else sent directly. One that falls due while the commit is under way is announced once
// it is done (waiting pulls, and the NOTIFY relayed by a reaper known to run): the reaper may
// have looked for it before the commit was visible. No NOTIFY when hopper.notify is off.
void queue_pushed(const std::string& queue, TimestampTz run_at, int64_t jobs);

// Wakes up to `jobs` pulls waiting on queue (every one if jobs <= 0) when the transaction commits.
void wake_pulls_at_commit(const std::string& queue, int64_t jobs);

// A running job of a queue with limits stopped running (finished, or put back for later): wakes a
// pull waiting on the queue when the transaction commits, since the job's slot is free.
void slot_freed(const std::string& queue);

// NOTIFY "hopper:done" for a finished job, if its queue has notify_done on.
void job_done(int64_t id, const std::string& queue, const char* state, bool queue_notifies_done);

}  // namespace hopper::notify
