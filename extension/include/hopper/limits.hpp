// Concurrency slots and rate limits: what queue_pull does differently for a queue with limits.
//
// A limited queue's claims are serialized by a transaction-level advisory lock on the queue. Under
// READ COMMITTED each statement takes its snapshot after the lock is granted, so a claim sees every
// claim committed before it and counts running jobs from the live rows: complete, fail, release,
// cancel and rescue free a slot just by changing the row, with no counter that could drift. A
// claim's own jobs stay invisible to others until it commits: it records them as in flight
// (include/hopper/inflight_claims.hpp), which the next claim counts, and lets the lock go; a queue
// with rate limits, a claim that cannot record its jobs, and one that took a job its own
// transaction wrote (which the next claim could not see at all, so not count) hold the lock until
// the puller's transaction ends.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "hopper/direct_claim.hpp"
#include "hopper/spi.hpp"

namespace hopper::limits {

// The advisory lock of a limited queue (queue_lock.hpp): classid kLockKey1, objid hashtext(queue).
// Its classid differs from the reaper's (reaper::kLockKey1), so the two key spaces cannot clash;
// queues whose names hash alike merely share a lock.
constexpr uint32_t kLockKey1 = 0x686f706c;  // "hopl"

// Most running jobs (queue-wide or per key) and claims per period a limit may allow.
constexpr int32_t kMaxLimit = 1000000;

// What enter() found: whether the queue carries the packed mark (include/hopper/batches.hpp: its
// packed jobs must become rows before the claim counts them), and whether its claims may let the
// lock go before commit (not with rate limits; see claim()).
struct Entered {
    bool packed = false;
    bool early_release = false;
};

// Called when queue_pull found the queue limited: true if it still has limits and is not paused,
// holding the queue's lock (refused under REPEATABLE READ and SERIALIZABLE, whose snapshot
// predates the lock). Then claim() must claim instead.
bool enter(spi::Connection& conn, const std::string& queue, Entered* entered);

// Takes the queue's lock again, to the end of the transaction, for a further claim of the same
// pull after claim() let it go.
void lock(const std::string& queue);

// Whether this transaction holds the lock of any limited queue (its claims' or a limit
// function's): a waiting pull or take, on whatever queue, must not sleep with it (pull_wait.hpp).
bool holds_any();

// The claim statement's first nine parameters (HOPPER_CLAIM_PARAM_OIDS).
using ClaimArgs = std::array<spi::Arg, 9>;

// The serialized claim, with queue_pull's result columns, then false (the packed column of the
// pull's other statements) and, at kOriginColumn, the xmin of each job's row as claimed; call
// holding the lock. With early_release it records the claimed jobs as in flight
// (include/hopper/inflight_claims.hpp) and lets the lock go (*released), unless they do not fit
// or one of them was written by this transaction (pushed, retried or unpacked in it: another
// claimer's snapshot has no row of it to count); otherwise the lock is held to the end of the
// transaction. `keys_only`: claim_direct() found that the window does not settle the pull.
constexpr int kOriginColumn = 12;
// And the job's concurrency_key, which claim() spends the keys' tokens by.
constexpr int kKeyColumn = 13;
spi::Result claim(spi::Connection& conn, const std::string& queue, const ClaimArgs& args,
                  bool early_release, bool keys_only, bool* released);

// claim() without the statements, for a queue whose claims may let the lock go (enter()'s
// early_release) and a pull with no kinds filter: direct_claim::lease_window(). nullopt where the
// statements must claim; *unsettled where the keys statement must (claim() with keys_only).
std::optional<direct_claim::Claimed> claim_direct(const direct_claim::Claim& c,
                                                  std::optional<int64_t> lease_us,
                                                  bool session_bound, bool* released,
                                                  bool* unsettled);

// The parameters of the claim statements, which queue_pull binds in one place: queue, at, n,
// lease, kinds, worker, claimer pid, claimer backend start, session_bound; statements with more
// append theirs to HOPPER_CLAIM_PARAM_OIDS.
#define HOPPER_CLAIM_PARAM_OIDS                                                                    \
    TEXTOID, TIMESTAMPTZOID, INT8OID, INTERVALOID, TEXTARRAYOID, TEXTOID, INT4OID, TIMESTAMPTZOID, \
        BOOLOID

// claim()'s statements (extension/src/limited_claim_sql.cpp), with the claim's parameters,
// in-flight jobs as $10 and as $11 the clock that leases and rate buckets run by (the pull's, held
// back to now unless a superuser pulls: args::lease_clock); `rated`: with the queue's rate limits.
// The window statement answers one row of NULLs, having claimed nothing, when the keys statement
// must claim instead.
spi::Statement& window_statement(bool rated);
spi::Statement& keys_statement(bool rated);
// What a claim from a queue with rate limits spent: its tokens, and the buckets it seeded. Run as
// the owner of hopper.rate_limits: workers only read the buckets.
spi::Statement& spend_statement();

// For the functions that change limits: locks the queue's row (P0002 if it does not exist), so
// that changes to one queue's limits are serialized and the next statements see each other's.
void lock_queue(spi::Connection& conn, const std::string& queue);
// Recomputes hopper.queues.limited from the queue's settings, overrides and buckets, and wakes
// the pulls waiting on the queue when the transaction commits (a limit may have been raised).
void refresh_limited(spi::Connection& conn, const std::string& queue);

}  // namespace hopper::limits
