// Packed batches: the jobs of one queue_push_batch stored in rows of up to kJobsPerRow, ids and
// payloads in arrays (hopper.job_batches). Claims take jobs from the front of a row; whatever acts
// on one waiting job, or on a queue with limits, unpacks rows into ordinary hopper.jobs rows first.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hopper/spi.hpp"

namespace hopper::batches {

// Jobs in one packed row: the array a claim slices stays small enough to stay in the row (no
// TOAST reads on the claim), and a claim of up to this many jobs locks at most two rows.
constexpr int kJobsPerRow = 100;

// What a packed push needs; the payloads are a one-dimensional jsonb[] without NULLs.
struct Push {
    std::string queue;
    std::optional<TimestampTz> run_at;
    int16_t priority = 0;
    std::optional<std::string> kind;
    std::optional<int32_t> max_attempts;
    Datum payloads = 0;
    int64_t jobs = 0;
};

// Whether a batch may be packed: hopper.pack_batches is on, it has two jobs or more, no keys, its
// payloads average at most kMaxPackedPayloadBytes, its jobs are due by the time the push's
// transaction started, and the transaction takes a snapshot per statement (see kMarkLockKey1).
// Every claim from a packed row reads the row's payloads whole: with large payloads a claim of
// one job would read a hundred (100 payloads of 900 kB: 100-124 ms per claim, against 2-3 ms for
// rows of their own).
constexpr int64_t kMaxPackedPayloadBytes = 1024;
bool packable(int64_t jobs, int64_t payload_bytes, bool any_key, std::optional<TimestampTz> run_at);

// hopper.queues.packed tells claims to read hopper.job_batches too. A packed push marks its queue
// in its own transaction, and the reaper clears the mark once the queue's packed rows are gone
// (unmark_if_drained), so that a queue drained of them claims as cheaply as one never packed.
// A push that found the mark set writes nothing to hopper.queues, so a clear could otherwise
// slip in between its read of the mark and its commit and leave its rows unseen by every claim:
// packed pushes hold this advisory lock (queue_lock.hpp: classid kMarkLockKey1, objid
// hashtext(queue)) shared from before they read the mark until they commit, and the clear takes
// it exclusively, without waiting, before it looks for rows. A transaction snapshot taken before
// the lock could still miss a push that committed in between: under REPEATABLE READ and
// SERIALIZABLE batches are not packed and marks are not cleared.
constexpr uint32_t kMarkLockKey1 = 0x686f7062;  // "hopb"

// Clears `queue`'s mark if it has no packed row left and no packed push is in flight; returns
// whether it did. Never waits.
bool unmark_if_drained(spi::Connection& conn, const std::string& queue);

// Stores the batch in packed rows and returns the new ids in payload order, or nothing when the
// queue has limits (its claims count rows: the caller pushes a row per job instead). The queue
// must exist. `stored_at` gets the run_at the SQL INSERT stored, if it was the one that wrote:
// a column of the operator's making (timestamptz(0)) may have rounded the one asked for.
std::optional<std::vector<int64_t>> push(spi::Connection& conn, const Push& batch,
                                         std::optional<TimestampTz>* stored_at);

// Whether this session has seen `queue` marked as having packed jobs (hopper.queues.packed): its
// claims then go straight to the statements that read packed rows. Forgotten when the mark changes
// (a relcache invalidation of hopper.queues).
bool seen_packed(const std::string& queue);
// Whether claim result r is the marker row of a queue with packed jobs: ids NULL and its column
// `col` true. Remembers the queue for seen_packed.
bool marks_packed(const spi::Result& r, int col, const std::string& queue);

// Moves the packed jobs of `queue` into hopper.jobs as available rows; returns how many. Rows
// another transaction holds (a claim taking from one, another pull's unpack) are passed over,
// not waited for: limited pulls unpack under their queue's lock, and one waiting there for an
// unpack whose transaction then pulled again deadlocked with it. Their jobs stay out of reach
// until that transaction ends, as a locked job row's would.
int64_t unpack_queue(spi::Connection& conn, const std::string& queue);

// Moves the packed row that holds waiting job `id`, if any, into hopper.jobs as available rows.
// Returns whether there was one.
bool unpack_job(spi::Connection& conn, int64_t id);

// After a claim that took jobs from packed rows: wakes one pull waiting on `queue` when the
// transaction commits. The claim held the rows it took from, and the pulls woken for their jobs
// (by the push, or by the commit of a claim like this one) that came to a row meanwhile passed it
// over and went back to sleep, though its next jobs wait: a push of 20 jobs in one row woke 20
// waiting pulls, one of which got the row. Each claim of a row hands it on to the next waiting
// pull, which is all a row held by one claimer at a time can serve. Claims of packed rows alone
// pay for it: a shared lookup and, if a pull waits, a signal, at commit.
void wake_after_packed_claim(const std::string& queue);

}  // namespace hopper::batches

// The packed row whose waiting part holds job `id`, for a query on hopper.job_batches named `row`:
// the nearest first_id at or below the id that names it (rows of concurrent batches interleave
// their ids, so the nearest row is not always the one). The walk goes down the primary key from
// the id.
#define HOPPER_PACKED_ROW_OF(row, id)                                                       \
    "WHERE " row ".first_id <= " id " AND " row ".last_id >= " id " AND " id " = ANY (" row \
    ".ids[" row ".taken + 1 :]) ORDER BY " row ".first_id DESC LIMIT 1"

// SQL pieces shared by the claims (queue_pull, queue_take). Each expects a CTE `candidates` of
// locked hopper.jobs rows (id, priority, run_at) in pull order, and gives:
//  - `packed`: the packed rows the claim may take from, locked, in pull order: as many as n jobs
//    need if the rows are full (n / kJobsPerRow + 1, never more than n), since rows it locks and
//    does not use are skipped by other claims until it commits. A claim that comes up short
//    (rows partly taken) takes again from the next rows (queue_pull, queue_take).
//  - `picked`: the first n jobs of both kinds in pull order: an ordinary job (batch NULL) or a
//    packed one (batch = its row, with its id and payload). Each row gives jobs from its front.
//    When `packed` holds as many rows as it may, rows it did not lock may hold jobs before the
//    ordinary ones after its last row: those are left for the next round, which the claim runs
//    when it comes up short, so that no packed job is passed over by a later one. "After" is
//    after the last row's last_id: the rows after it start past it (a batch draws its ids in one
//    pass; only batches pushed at once with one priority and run_at can interleave theirs, an
//    order the claims keep only roughly), and the ordinary jobs before it are merged with the
//    row's own. Its first_id
//    passed over a job released from the row (or put back by queue_fail_taken), an ordinary
//    job keyed between first_id and the row's front, for the rest of the row.
//  - `used`, `moved`, `emptied`: the rows' fronts moved past the packed jobs picked, and rows
//    left empty deleted. The new front comes from `packed`, the version the claim locked: the
//    UPDATE and the DELETE match rows by key alone, because a condition on the version their own
//    snapshot saw (another claim may have moved the front and committed since) is rechecked on
//    the locked version only for rows that passed it, and a row could then be neither moved nor
//    deleted and its jobs handed out twice.
static_assert(hopper::batches::kJobsPerRow == 100, "HOPPER_PACKED_CANDIDATES divides by 100");
#define HOPPER_PACKED_CANDIDATES(queue, due, kinds, n, gate)                                     \
    "packed AS MATERIALIZED ("                                                                   \
    "  SELECT first_id, last_id, priority, run_at, created_at, kind, max_attempts, taken, ids, " \
    "    payloads "                                                                              \
    "  FROM hopper.job_batches WHERE queue = " queue " AND run_at <= " due "    AND (" kinds     \
    "::text[] IS NULL OR kind = ANY (" kinds ")) AND " gate                                      \
    "  ORDER BY priority, run_at, first_id "                                                     \
    "  LIMIT LEAST(" n ", " n                                                                    \
    " / 100 + 1) FOR UPDATE SKIP LOCKED), "                                                      \
    "picked AS MATERIALIZED (SELECT m.id, m.batch, m.payload FROM ("                             \
    "  SELECT c.id, c.priority, c.run_at, NULL::bigint AS batch, NULL::jsonb AS payload "        \
    "  FROM candidates c WHERE (SELECT pg_catalog.count(*) FROM packed) < LEAST(" n ", " n       \
    "    / 100 + 1) OR ROW(c.priority, c.run_at, c.id) < (SELECT l.priority, l.run_at, "         \
    "    l.last_id FROM packed l "                                                               \
    "    ORDER BY l.priority DESC, l.run_at DESC, l.first_id DESC LIMIT 1) UNION ALL "           \
    "  SELECT u.id, p.priority, p.run_at, p.first_id, u.payload FROM packed p, ROWS FROM ("      \
    "    pg_catalog.unnest(p.ids[p.taken + 1 : p.taken + (" n                                    \
    ")::integer]), "                                                                             \
    "    pg_catalog.unnest(p.payloads[p.taken + 1 : p.taken + (" n                               \
    ")::integer])) u(id, payload) "                                                              \
    "  ) m ORDER BY m.priority, m.run_at, m.id LIMIT " n                                         \
    "), "                                                                                        \
    "used AS (SELECT k.batch, p.taken + pg_catalog.count(*)::integer AS taken, "                 \
    "    p.taken + pg_catalog.count(*)::integer >= pg_catalog.cardinality(p.ids) AS empty "      \
    "  FROM picked k JOIN packed p ON p.first_id = k.batch GROUP BY k.batch, p.taken, p.ids), "  \
    "moved AS (UPDATE hopper.job_batches b SET taken = u.taken FROM used u "                     \
    "  WHERE b.first_id = u.batch AND NOT u.empty RETURNING 1), "                                \
    "emptied AS (DELETE FROM hopper.job_batches b USING used u "                                 \
    "  WHERE b.first_id = u.batch AND u.empty RETURNING 1), "
