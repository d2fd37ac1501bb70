// Workers: queue_pull claims jobs under a lease with a fresh fencing token.
#include <string>

#include "hopper/args.hpp"
#include "hopper/batches.hpp"
#include "hopper/claim_commit.hpp"
#include "hopper/claim_hint.hpp"
#include "hopper/direct_claim.hpp"
#include "hopper/lease_token.hpp"
#include "hopper/limits.hpp"
#include "hopper/pull_wait.hpp"
#include "hopper/reaper.hpp"
#include "hopper/rescue.hpp"
#include "hopper/result.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "access/xact.h"
#include "utils/timestamp.h"
}

using namespace hopper;

namespace {

// The queue's settings, and the first $3 available jobs of hopper.jobs in pull order, locked;
// `gate` says which queues claim them here.
#define HOPPER_CLAIM_CANDIDATES(resume_condition, gate)                                    \
    "WITH q AS (SELECT lease, limited, packed FROM hopper.queues WHERE name = $1 AND NOT " \
    "paused), "                                                                            \
    "candidates AS MATERIALIZED ("                                                         \
    "  SELECT id, priority, run_at FROM hopper.jobs "                                      \
    "  WHERE queue = $1 AND state OPERATOR(pg_catalog.=) 'available' "                     \
    "    AND run_at <= $2 " resume_condition                                               \
    "    AND ($5::text[] IS NULL OR kind = ANY ($5)) "                                     \
    "    AND EXISTS (SELECT 1 FROM q WHERE " gate                                          \
    ") "                                                                                   \
    "  ORDER BY priority, run_at, id LIMIT $3 FOR UPDATE SKIP LOCKED), "

// Leases the jobs of hopper.jobs whose ids the query `ids` gives (its column id), from $10, the
// lease clock (args::lease_clock($2)).
#define HOPPER_CLAIM_UPDATE(ids)                                                              \
    "claimed AS ("                                                                            \
    "  UPDATE hopper.jobs j SET state = 'running', attempt = j.attempt + 1, "                 \
    "    lease_token = pg_catalog.nextval('hopper.lease_token_seq'), "                        \
    "    lease_until = $10 + COALESCE($4, (SELECT lease FROM q)), started_at = $10, "         \
    "    worker = $6, claimed_pid = $7, claimed_backend_start = $8, session_bound = $9 "      \
    "  WHERE j.id = ANY (ARRAY(SELECT id FROM " ids                                           \
    ")) "                                                                                     \
    "  RETURNING j.id, j.queue, j.kind, j.payload, j.attempt, j.lease_token, j.lease_until, " \
    "    j.run_at, j.created_at, j.priority, false AS packed)"

// hopper.jobs alone. A queue with limits, or one that has had packed jobs, claims nothing here and
// answers a marker row of NULLs, its last column telling which of the two it is.
#define HOPPER_CLAIM_SQL(resume_condition)                                                     \
    HOPPER_CLAIM_CANDIDATES(resume_condition, "NOT limited AND NOT packed")                    \
    HOPPER_CLAIM_UPDATE("candidates")                                                          \
    " SELECT NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::integer, NULL::bigint, " \
    "  NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::smallint, "              \
    "  packed AND NOT limited "                                                                \
    "FROM q WHERE limited OR packed "                                                          \
    "UNION ALL (SELECT * FROM claimed ORDER BY priority, run_at, id)"

// The same for a queue that has had packed jobs (include/hopper/batches.hpp): packed rows and
// hopper.jobs merged in pull order; the packed jobs picked become running rows of hopper.jobs.
#define HOPPER_PACKED_CLAIM_SQL(resume_condition)                                                  \
    HOPPER_CLAIM_CANDIDATES(resume_condition, "NOT limited")                                       \
    HOPPER_PACKED_CANDIDATES("$1", "$2", "$5", "$3", "EXISTS (SELECT 1 FROM q WHERE NOT limited)") \
    HOPPER_CLAIM_UPDATE("picked WHERE batch IS NULL")                                              \
    ", unpacked AS ("                                                                              \
    "  INSERT INTO hopper.jobs (id, queue, state, priority, run_at, attempt, max_attempts, "       \
    "    lease_token, lease_until, claimed_pid, claimed_backend_start, session_bound, "            \
    "    created_at, started_at, kind, worker, payload) "                                          \
    "  SELECT k.id, $1, 'running', p.priority, p.run_at, 1, p.max_attempts, "                      \
    "    pg_catalog.nextval('hopper.lease_token_seq'), "                                           \
    "    $10 + COALESCE($4, (SELECT lease FROM q)), $7, $8, $9, p.created_at, $10, p.kind, $6, "   \
    "    k.payload "                                                                               \
    "  FROM picked k JOIN packed p ON p.first_id = k.batch ORDER BY k.id "                         \
    "  RETURNING id, queue, kind, payload, attempt, lease_token, lease_until, run_at, "            \
    "    created_at, priority, true AS packed) "                                                   \
    "SELECT NULL::bigint, NULL::text, NULL::text, NULL::jsonb, NULL::integer, NULL::bigint, "      \
    "  NULL::timestamptz, NULL::timestamptz, NULL::timestamptz, NULL::smallint, NULL::boolean "    \
    "FROM q WHERE limited "                                                                        \
    "UNION ALL "                                                                                   \
    "(SELECT * FROM (SELECT * FROM claimed UNION ALL SELECT * FROM unpacked) c "                   \
    "   ORDER BY c.priority, c.run_at, c.id)"

// Claims up to $3 available jobs whose time has come, in order (priority, run_at, id). SKIP LOCKED
// lets concurrent pullers pass each other instead of queueing on the same rows. The UPDATE takes
// the locked ids as an array, which leaves one plan (primary-key lookups): as a join, a plan made
// while the table was nearly empty could walk the whole primary key and filter, which under a
// held snapshot read every dead entry on each claim. A queue with
// limits claims nothing here and answers one row of NULLs instead: its claims go through
// limits::claim_statement(). Saying so here spares unlimited queues a lookup of their own.
// The plan is made once: a generic plan prices "LIMIT $3" as a tenth of the table, so the plan
// cache judged it dearer than a custom one and planned every pull anew (two thirds of a pull's
// CPU), though both plans walk jobs_pull_idx the same way.
spi::Statement& claim_statement() {
    static spi::Statement st(HOPPER_CLAIM_SQL(""), {HOPPER_CLAIM_PARAM_OIDS, TIMESTAMPTZOID},
                             CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
    return st;
}

// The same, starting at the queue's hint ($11, $12, $13; see include/hopper/claim_hint.hpp): the
// row comparison is an index condition, so the scan descends straight to the hint.
spi::Statement& resumed_claim_statement() {
    static spi::Statement st(
        HOPPER_CLAIM_SQL("AND (priority, run_at, id) >= ($11, $12, $13) "),
        {HOPPER_CLAIM_PARAM_OIDS, TIMESTAMPTZOID, INT2OID, TIMESTAMPTZOID, INT8OID},
        CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
    return st;
}

spi::Statement& packed_claim_statement() {
    static spi::Statement st(HOPPER_PACKED_CLAIM_SQL(""), {HOPPER_CLAIM_PARAM_OIDS, TIMESTAMPTZOID},
                             CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
    return st;
}

spi::Statement& resumed_packed_claim_statement() {
    static spi::Statement st(
        HOPPER_PACKED_CLAIM_SQL("AND (priority, run_at, id) >= ($11, $12, $13) "),
        {HOPPER_CLAIM_PARAM_OIDS, TIMESTAMPTZOID, INT2OID, TIMESTAMPTZOID, INT8OID},
        CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
    return st;
}

#undef HOPPER_CLAIM_SQL
#undef HOPPER_PACKED_CLAIM_SQL
#undef HOPPER_CLAIM_CANDIDATES
#undef HOPPER_CLAIM_UPDATE

}  // namespace

HOPPER_FUNCTION(hopper_queue_pull) {
    std::string queue = args::queue_name(fcinfo, 0);
    int32_t n = args::pull_size(fcinfo, 1);
    auto lease = args::duration(fcinfo, 2, "lease", 0, args::kMaxLeaseUs);
    auto worker = args::optional_text(fcinfo, 3, "worker", args::kMaxWorker);
    bool kinds_null = args::kinds_absent(fcinfo, 4);
    bool own_clock = !args::is_null(fcinfo, 5);
    TimestampTz at = args::clock(fcinfo, 5, "at");
    if (own_clock) args::check_lease_at(at);
    bool session_bound = !args::is_null(fcinfo, 6) && PG_GETARG_BOOL(6);
    int64_t wait_us = pull_wait::wait_us(fcinfo, 7, "queue_pull");

    // Everything this call writes counts as the claim's: a page pruned on the way, say.
    claim_commit::before_claim();
    lease_token::before_claims();
    result::SetResult out(fcinfo);
    spi::Connection conn;
    reaper::ensure_running(conn);
    claim_hint::Start hint;
    bool limited = false;
    bool early_release = false;  // the limited claim may let the queue's lock go
    bool lock_released = false;  // and did
    bool unsettled = false;      // the direct window claim left the pull to the keys statement
    bool packed = batches::seen_packed(queue);
    bool resume = false;
    // A limited claim that kept the queue's lock (it took a job its own transaction wrote, or
    // more jobs than the in-flight list holds) keeps it to commit: the other pulls cannot count
    // those jobs otherwise. A later claim of this pull (a top-up after a rescue) must not let it
    // go with its own jobs, which it would, the lock being taken once for both.
    auto keep_lock_if_kept = [&] {
        if (early_release && !lock_released) early_release = false;
    };
    auto claim = [&](int64_t limit) {
        spi::Arg queue_arg = spi::arg_text(queue);
        spi::Arg at_arg = spi::arg_datum(TimestampTzGetDatum(at));
        spi::Arg lease_arg = spi::arg_datum(args::duration_datum(lease), !lease);
        spi::Arg kinds_arg = spi::arg_datum(kinds_null ? (Datum)0 : PG_GETARG_DATUM(4), kinds_null);
        spi::Arg worker_arg = spi::arg_text(worker);
        spi::Arg start_arg = spi::arg_datum(TimestampTzGetDatum(MyStartTimestamp));
        if (limited) {
            // A further claim of this pull (a top-up, after a rescue) takes the lock again, to
            // commit: the probe that allowed letting it go was made under the first hold.
            if (lock_released) {
                limits::lock(queue);
                lock_released = false;
                early_release = false;
            }
            bool keys_only = unsettled;
            unsettled = false;
            spi::Result r =
                limits::claim(conn, queue,
                              {queue_arg, at_arg, spi::arg(limit), lease_arg, kinds_arg, worker_arg,
                               spi::arg_int4(MyProcPid), start_arg, spi::arg_bool(session_bound)},
                              early_release, keys_only, &lock_released);
            keep_lock_if_kept();
            return r;
        }
        spi::Arg lease_at_arg = spi::arg_datum(TimestampTzGetDatum(args::lease_clock(at)));
        if (resume)
            return conn.exec(
                packed ? resumed_packed_claim_statement() : resumed_claim_statement(),
                {queue_arg, at_arg, spi::arg(limit), lease_arg, kinds_arg, worker_arg,
                 spi::arg_int4(MyProcPid), start_arg, spi::arg_bool(session_bound), lease_at_arg,
                 spi::arg_datum(Int16GetDatum(hint.key.priority)),
                 spi::arg_datum(TimestampTzGetDatum(hint.key.run_at)), spi::arg(hint.key.id)});
        return conn.exec(
            packed ? packed_claim_statement() : claim_statement(),
            {queue_arg, at_arg, spi::arg(limit), lease_arg, kinds_arg, worker_arg,
             spi::arg_int4(MyProcPid), start_arg, spi::arg_bool(session_bound), lease_at_arg});
    };

    // Hands the claimed rows to the caller, leaving out the "queue has limits" marker, and tells
    // the hint where the claim ended. Only a claim that saw everything due, in a snapshot taken
    // after the hint was read, may raise it: no kinds filter, no clock of its own, and a snapshot
    // per statement.
    bool may_raise = false;
    // Whether the last claim took jobs from packed rows: it locks only as many rows as full ones
    // would need, so a claim short of n tops up from the next rows.
    bool took_packed = false;
    bool took_any_packed = false;  // some claim of this call did
    auto add = [&](const spi::Result& r) {
        uint64_t added = 0;
        took_packed = false;
        bool has_packed_column = r.desc()->natts >= 11;
        for (uint64_t i = 0; i < r.rows(); ++i) {
            if (r.is_null(i, 1)) continue;
            out.add_row(r, i);
            ++added;
            if (has_packed_column && !r.is_null(i, 11) && r.get_bool(i, 11))
                took_packed = took_any_packed = true;
        }
        // The hint tracks hopper.jobs alone: a claim that also took packed jobs leaves it be.
        if (added > 0 && !took_packed) {
            uint64_t last = r.rows() - 1;
            claim_hint::Key key{r.get_int16(last, 10), r.get_timestamptz(last, 8),
                                r.get_int64(last, 1)};
            if (may_raise && !limited) claim_hint::claimed(hint, key, at);
        }
        return added;
    };

    // The common case goes straight through the access methods (include/hopper/direct_claim.hpp);
    // nullopt: the statement must do it.
    std::optional<int64_t> lease_us;
    if (lease) lease_us = lease->us;
    // The direct claim read the queue's row and found it limited: the unlimited claim statement,
    // which would say so too, is skipped.
    bool known_limited = false;
    auto direct = [&](int64_t limit) -> std::optional<uint64_t> {
        if (!kinds_null) return std::nullopt;
        if (limited) {
            // Queues with rate limits, and a further claim that holds the lock to commit, go to
            // the statements.
            if (!early_release || lock_released) return std::nullopt;
            auto c = limits::claim_direct({queue, limit, at, resume ? &hint.key : nullptr, worker},
                                          lease_us, session_bound, &lock_released, &unsettled);
            if (!c) return std::nullopt;
            keep_lock_if_kept();
            took_packed = false;
            for (auto& row : c->rows) out.add_values(row.values, row.nulls);
            // No job waits before the first one passed over for its full key, nor before the
            // last one claimed.
            std::optional<claim_hint::Key> to = c->first_passed;
            if (!c->rows.empty() && (!to || claim_hint::before(c->rows.back().key, *to)))
                to = c->rows.back().key;
            if (to && may_raise) claim_hint::claimed(hint, *to, at);
            return c->rows.size();
        }
        auto c = direct_claim::lease({queue, limit, at, resume ? &hint.key : nullptr, worker},
                                     lease_us, session_bound);
        if (!c) return std::nullopt;
        if (c->limited) {
            known_limited = true;
            return std::nullopt;
        }
        took_packed = c->took_packed;
        took_any_packed = took_any_packed || took_packed;
        for (auto& row : c->rows) out.add_values(row.values, row.nulls);
        if (!c->rows.empty() && may_raise && !took_packed)
            claim_hint::claimed(hint, c->rows.back().key, at);
        return c->rows.size();
    };
    auto claim_some = [&](int64_t limit) {
        if (auto got = direct(limit)) return *got;
        return add(claim(limit));
    };

    // Packed jobs this attempt turned into rows: its transaction holds their packed rows.
    bool unpacked = false;
    auto enter_limited = [&] {
        limits::Entered entered;
        if (!limits::enter(conn, queue, &entered)) return false;
        limited = true;
        early_release = entered.early_release;
        // The limited claim counts rows of hopper.jobs: packed jobs pushed before the queue had
        // limits (or while it got them) become rows first.
        if (entered.packed && batches::unpack_queue(conn, queue) > 0) unpacked = true;
        return true;
    };

    auto attempt = [&]() -> bool {
        // A waiting pull judges "due" by the clock at each attempt: jobs pushed after its
        // transaction began are due for it.
        if (wait_us > 0 && !own_clock) at = GetCurrentTimestamp();
        // On a limited queue each attempt is a claim of its own, under the lock taken anew.
        limited = false;
        early_release = false;
        lock_released = false;
        unsettled = false;
        unpacked = false;
        // Read before the claim statement takes its snapshot: see include/hopper/claim_hint.hpp.
        hint = claim_hint::begin(queue);
        resume = hint.resume;
        may_raise = kinds_null && !own_clock && !IsolationUsesXactSnapshot();
        // With no reaper running, expired leases are taken over before the claim, not only when
        // the queue runs short: a crashed worker's job would otherwise stay running for as long
        // as the queue has other jobs due (on a limited queue, keeping its key's slot). With a
        // live reaper this costs one read of its PGPROC. The jobs put back may lie below the
        // hint: the claim starts from the front and leaves the hint be. A limited queue's lock
        // is taken before the rescue locks any job: queue_drop takes it before it deletes them.
        rescue::Counts rescued;
        if (!reaper::known_alive()) {
            enter_limited();
            rescued = rescue::before_claim(conn, queue, at, n);
        }
        if (rescued.retried > 0) {
            resume = false;
            may_raise = false;
        }
        std::optional<uint64_t> claimed = direct(n);
        // The direct claim found the queue limited: the limited claim, direct where it can be.
        if (!claimed && !limited && known_limited && enter_limited()) claimed = direct(n);
        if (!claimed) {
            spi::Result r = claim(n);
            if (!limited && !packed && batches::marks_packed(r, 11, queue)) {
                packed = true;
                r = claim(n);
            }
            if (!limited && !r.empty() && r.is_null(0, 1) && enter_limited()) r = claim(n);
            claimed = add(r);
        }
        uint64_t got = *claimed;
        // Each round that took packed jobs took at least one: the loop ends.
        while (took_packed && got < static_cast<uint64_t>(n))
            got += claim_some(n - static_cast<int64_t>(got));
        // Short of n: take over expired leases too.
        rescue::Counts short_rescued = rescue::for_short_claim(conn, queue, at, n, got, rescued);
        if (short_rescued.retried > 0) {
            resume = false;
            may_raise = false;
            got += claim_some(n - static_cast<int64_t>(got));
        }
        rescued.retried += short_rescued.retried;
        rescued.dead += short_rescued.dead;
        // Jobs rescued and not claimed here (another kind, a full key, or dead) are held by
        // this transaction until it ends: a waiting pull must not sleep on them, or no one else
        // could take them, and their old holder's calls would wait, for the whole wait.
        if (rescued.retried + rescued.dead > 0) return true;
        // So are the jobs it unpacked and did not claim: until it ends they are rows no one else
        // sees, and a cancel of one waits for it.
        if (unpacked) return true;
        // A limited claim that keeps its queue's lock to the end of the transaction does not wait
        // with it (pull_wait.cpp). One that let it go waits like any other, woken by pushes and by
        // whatever frees a slot.
        return got > 0;
    };
    pull_wait::attempt_until_done(queue, wait_us, !kinds_null, attempt);
    if (took_any_packed) batches::wake_after_packed_claim(queue);
    conn.finish();
    claim_commit::after_claim();
    return (Datum)0;
}
