// Rescuing jobs whose lease expired: shared by queue_pull and queue_take (inline, so expired jobs
// are claimable even with no reaper running) and the reaper.
#pragma once

#include <cstdint>
#include <string>

#include "hopper/spi.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

namespace hopper::rescue {

struct Counts {
    uint64_t retried = 0;  // back to available
    uint64_t dead = 0;     // attempts used up
    uint64_t seen = 0;     // jobs a batch took up: rescued, held by another session, or refused
    // A claim's rescue (before_claim) found every expired lease it could take: the same claim's
    // short rescue would find none, and does not look again.
    bool all_taken = false;
};

// Where the reaper's run in batches has got to, in the order it takes jobs up (expired leases:
// lease_until, id; gone sessions: id). A job a batch passed over (held locked by another
// session, or whose rescue a trigger of the user's refused) stays stuck and first in that order:
// without the cursor a batch full of them ended every pass, and the jobs after them waited.
struct Cursor {
    bool started = false;
    TimestampTz at = 0;
    int64_t id = 0;
};

// Rescues up to `limit` running jobs of `queue` whose lease ended before `at`. Their lease token is
// cleared, so the old holder can no longer complete, fail, heartbeat or report progress. With
// `backoff` they come back after the queue's retry backoff; without, at `at`. (A claim's rescue,
// for_short_claim, puts them back at the earlier of its lease clock and its own `at`.)
Counts expired_leases(spi::Connection& conn, const std::string& queue, TimestampTz at,
                      int64_t limit, bool backoff);

// The reaper's batch of expired leases (with backoff): from `after` on once it has started.
Counts expired_leases(spi::Connection& conn, const std::string& queue, TimestampTz at,
                      int64_t limit, const Cursor& after);

// The same batch after it failed as a whole: each job in a subtransaction of its own. A job whose
// rescue fails (a trigger of the user's raising for it) is logged as a WARNING naming it and left
// as it is; the others are rescued. Moves `after` to the last job taken up.
Counts expired_leases_one_by_one(spi::Connection& conn, const std::string& queue, TimestampTz at,
                                 int64_t limit, Cursor& after);

// For a claim (queue_pull, queue_take) that found `claimed` of the `wanted` jobs: rescues up to
// the missing number of expired leases so they can be claimed at once, even when no reaper runs.
// Those that came back available did so at `at`, which may lie below the queue's claim hint, so
// the second claim starts from the front and must not raise the hint. A lease counts as expired
// by `at` only for a superuser: anyone else's clock for it stops at the real time, so that no
// worker can take over another's live lease by dating its pull ahead ("at" is for tests).
// A job whose rescue fails for a reason of its own (a trigger of the user's raising for it) is
// passed over and left as it was, for the reaper to report, and the claim goes on; a cancel, a
// timeout, a serialization failure and the like still fail the claim.
// After before_claim (`before`, what it did) it does nothing when that found no more to take.
Counts for_short_claim(spi::Connection& conn, const std::string& queue, TimestampTz at,
                       int64_t wanted, uint64_t claimed, const Counts& before = {});

// For a claim (queue_pull, queue_take) before it claims: when this backend knows of no live
// reaper in the database (stopped with reaper_stop(), hopper.reaper_enabled off, no worker slot
// free), rescues up to `wanted` expired leases of `queue` as for_short_claim does, so that a job
// whose worker crashed is taken over even while the queue has other jobs due (and a limited
// queue's key gets its slot back). With a live reaper it does nothing: the reaper rescues them
// within its pass, after the queue's backoff. As after for_short_claim, the claim that follows a
// rescue starts from the front and must not raise the hint, and a waiting pull must not sleep.
Counts before_claim(spi::Connection& conn, const std::string& queue, TimestampTz at,
                    int64_t wanted);

// Rescues up to `limit` running jobs pulled with session_bound whose claiming backend (pid and
// backend start time, since pids are reused) is no longer among the server's backends, whatever
// their lease says. The attempt stays counted: they come back available at `at`, or go to history
// as dead when attempts are used up, with the error "worker backend gone (pid N)"; their token is
// cleared. Sends NOTIFY for the queues that got jobs back. A backend whose start time the role may
// not see counts as alive, so run it as a role that sees them all (the reaper runs as superuser).
// With `after`, only jobs past it, and it moves to the last job taken up.
Counts orphaned_sessions(spi::Connection& conn, TimestampTz at, int64_t limit,
                         Cursor* after = nullptr);

// The same batch after it failed as a whole: each job in a subtransaction of its own, as
// expired_leases_one_by_one does.
Counts orphaned_sessions_one_by_one(spi::Connection& conn, TimestampTz at, int64_t limit,
                                    Cursor& after);

}  // namespace hopper::rescue
