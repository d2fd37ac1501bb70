// See include/hopper/reaper_pass.hpp.
#include <algorithm>
#include <string>

#include "hopper/batches.hpp"
#include "hopper/notify.hpp"
#include "hopper/reaper.hpp"
#include "hopper/reaper_pass.hpp"
#include "hopper/reaper_relay.hpp"
#include "hopper/rescue.hpp"
#include "hopper/schedule.hpp"
#include "hopper/worker_txn.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
}

namespace hopper::reaper {

void check_for_interrupts() {
    pg_guard([] { CHECK_FOR_INTERRUPTS(); });
    relay_if_woken();
    bool wanted = false;
    worker::in_transaction([&] { wanted = database_wanted(); });
    if (wanted) throw StepAside{};
}

namespace {

TimestampTz transaction_now() {
    return GetCurrentTransactionStartTimestamp();
}

// Repeats one batched step, each batch in its own transaction, until a batch comes back short.
template <typename Step>
uint64_t in_batches(int64_t batch, Step&& step) {
    uint64_t total = 0;
    for (;;) {
        uint64_t done = 0;
        worker::in_transaction([&] {
            spi::Connection conn;
            done = step(conn);
            conn.finish();
        });
        total += done;
        if (done < static_cast<uint64_t>(batch)) return total;
        check_for_interrupts();
    }
}

// Repeats one batched rescue, each batch in its own transaction, while batches come back full
// (Counts::seen: jobs taken up, rescued or not). A batch that fails as a whole (a trigger of the
// user's raising for one of its jobs, say) is run again one job at a time in a transaction of its
// own, each job in a subtransaction: the jobs that fail are reported and left as they are, the
// others are rescued, and the cursor walks past them all. Before, the failing job undid its whole
// batch at every pass, and no job of the queue after it was ever rescued. A batch that succeeds
// pays nothing for this. The cursor moves only with a transaction that committed.
template <typename Batch, typename OneByOne>
uint64_t rescue_in_batches(int64_t batch, Batch&& step, OneByOne&& one_by_one) {
    uint64_t total = 0;
    rescue::Cursor after;
    for (;;) {
        rescue::Counts c;
        rescue::Cursor moved = after;
        if (!worker::committed([&] {
                spi::Connection conn;
                c = step(conn, moved);
                conn.finish();
            })) {
            moved = after;
            worker::in_transaction([&] {
                spi::Connection conn;
                c = one_by_one(conn, moved);
                conn.finish();
            });
        }
        after = moved;
        total += c.retried + c.dead;
        if (c.seen < static_cast<uint64_t>(batch)) return total;
        check_for_interrupts();
    }
}

// The first pass wakes every queue with any due job: workers may have missed the pushes' NOTIFY
// while the server (or this reaper) was down. Asked in pull order, so that it walks
// jobs_pull_idx to the first due job (without the ORDER BY a plan may read the whole table).
bool any_due(spi::Connection& conn, const std::string& queue, TimestampTz until) {
    static spi::Statement st(
        "SELECT 1 FROM hopper.jobs WHERE queue = $1 AND state OPERATOR(pg_catalog.=) 'available' "
        "  AND run_at <= $2 "
        "ORDER BY priority, run_at, id LIMIT 1",
        {TEXTOID, TIMESTAMPTZOID}, CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
    // Packed rows hold only waiting jobs; the row first in pull order answers for its queue.
    static spi::Statement packed(
        "SELECT 1 FROM hopper.job_batches WHERE queue = $1 AND run_at <= $2 "
        "ORDER BY priority, run_at, first_id LIMIT 1",
        {TEXTOID, TIMESTAMPTZOID}, CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
    return !conn.exec(st, {spi::arg_text(queue), spi::arg_datum(TimestampTzGetDatum(until))})
                .empty() ||
           !conn.exec(packed, {spi::arg_text(queue), spi::arg_datum(TimestampTzGetDatum(until))})
                .empty();
}

// Every lock wait of the reaper ends well before deadlock_timeout. DROP EXTENSION (or DDL on
// hopper's tables) locks the tables one after another, in an order of its own, and may sit queued
// behind a long transaction (a worker's open BEGIN; queue_take ...) while holding some of them; the
// reaper's transactions read them in another order, so the two end up waiting on each other. The
// deadlock is then found by whichever waits longest past deadlock_timeout, and that was the DROP:
// it failed with 40P01 though it only had to wait for that transaction. With this lock timeout the
// reaper gives up its wait, and the locks it holds, first, and tries again at its next pass. Set
// before every pass: a reload may change deadlock_timeout. A database's own lock_timeout is
// overridden, as its search_path is. At most half a second, as the partition DDL waited before:
// with a long deadlock_timeout a quarter of it would queue that DDL ahead of completions for long.
void wait_less_than_deadlock_timeout() {
    std::string ms = std::to_string(std::clamp(DeadlockTimeout / 4, 1, 500));
    pg_guard([&] { SetConfigOption("lock_timeout", ms.c_str(), PGC_SUSET, PGC_S_OVERRIDE); });
}

// A pass's cost follows the work there is to do, not the number of queues: producers may make
// any number of them (INSERT INTO hopper.queues, a push to a new name), and with work asked of
// every queue on every pass (a transaction, even a commit, each) a pass over 300,000 queues took
// minutes while a 1-second lease waited to be rescued. Each step first asks, in one statement,
// which queues it has work in, through an index of the table it works on, and then works on
// those alone. Each question is a loose index scan: one descent per queue that has such rows at
// all (leased jobs, history), however many jobs each holds, and none for the queues that hold
// none; but jobs fallen due, which are read by time (queues_with_jobs_become_due).
std::vector<std::string> queue_names(spi::Connection& conn, spi::Statement& st,
                                     std::initializer_list<spi::Arg> args) {
    spi::Result r = conn.exec(st, args);
    std::vector<std::string> names;
    names.reserve(r.rows());
    for (uint64_t i = 0; i < r.rows(); ++i) names.push_back(r.get_text(i, 1));
    return names;
}

// The queues with a lease expired before `at`, in name order, from jobs_lease_idx.
std::vector<std::string> queues_with_expired_leases(spi::Connection& conn, TimestampTz at) {
    static spi::Statement st(
        "WITH RECURSIVE leased(queue) AS ("
        "  (SELECT queue FROM hopper.jobs WHERE lease_until IS NOT NULL ORDER BY queue LIMIT 1) "
        "  UNION ALL "
        "  SELECT (SELECT j.queue FROM hopper.jobs j WHERE j.lease_until IS NOT NULL "
        "    AND j.queue > l.queue ORDER BY j.queue LIMIT 1) FROM leased l "
        "  WHERE l.queue IS NOT NULL) "
        // One probe per queue (LIMIT 1 keeps it a probe: as EXISTS, the planner may read every
        // expired lease of every queue instead).
        "SELECT l.queue FROM leased l CROSS JOIN LATERAL ("
        "  SELECT 1 FROM hopper.jobs j WHERE j.queue = l.queue "
        "    AND j.state OPERATOR(pg_catalog.=) 'running' AND j.lease_until < $1 LIMIT 1) x "
        "WHERE l.queue IS NOT NULL",
        {TIMESTAMPTZOID}, CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
    return queue_names(conn, st, {spi::arg_datum(TimestampTzGetDatum(at))});
}

// The queues with jobs that became due in (since, until]: scheduled jobs whose time came, and
// retried or rescued jobs whose backoff ended. Their LISTENing workers need a wake-up. Jobs due
// at once when pushed (run_at = created_at) were announced by their push already, so the question
// runs every pass on jobs_delayed_idx, which holds only the others, by time: it reads the jobs
// whose time came in the interval and no others. (With the queue first, a walk over its queues
// cost every pass a descent for each queue holding a job that fell due long ago and was not yet
// claimed: 20,000 such queues kept the reaper at a quarter of a core. Without the index it read
// the whole table, once per queue per pass.) Packed rows need no look: a batch is packed only
// when its jobs are due at the push.
std::vector<std::string> queues_with_jobs_become_due(spi::Connection& conn, TimestampTz since,
                                                     TimestampTz until) {
    // In run_at order, in a subquery kept apart (OFFSET 0): a generic plan made on an empty
    // table (a fresh install, a TRUNCATE) otherwise walked jobs_pull_idx, every available job on
    // every pass, until the next ANALYZE.
    static spi::Statement st(
        "SELECT DISTINCT d.queue FROM ("
        "  SELECT queue FROM hopper.jobs WHERE state OPERATOR(pg_catalog.=) 'available' "
        "    AND run_at > created_at AND run_at > $1 AND run_at <= $2 ORDER BY run_at OFFSET 0) d",
        {TIMESTAMPTZOID, TIMESTAMPTZOID}, CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
    return queue_names(
        conn, st,
        {spi::arg_datum(TimestampTzGetDatum(since)), spi::arg_datum(TimestampTzGetDatum(until))});
}

// The queues with due jobs or packed rows (the first pass's wake-ups): jobs_pull_idx and
// job_batches_pull_idx, then any_due on each.
std::vector<std::string> queues_with_due_jobs(spi::Connection& conn, TimestampTz until) {
    static spi::Statement st(
        "WITH RECURSIVE waiting(queue) AS ("
        "  (SELECT queue FROM hopper.jobs WHERE state OPERATOR(pg_catalog.=) 'available' "
        "    ORDER BY queue LIMIT 1) "
        "  UNION ALL "
        "  SELECT (SELECT j.queue FROM hopper.jobs j WHERE j.state OPERATOR(pg_catalog.=) "
        "    'available' AND j.queue > w.queue ORDER BY j.queue LIMIT 1) "
        "  FROM waiting w WHERE w.queue IS NOT NULL), "
        "packed(queue) AS ("
        "  (SELECT queue FROM hopper.job_batches ORDER BY queue LIMIT 1) "
        "  UNION ALL "
        "  SELECT (SELECT b.queue FROM hopper.job_batches b WHERE b.queue > p.queue "
        "    ORDER BY b.queue LIMIT 1) FROM packed p WHERE p.queue IS NOT NULL) "
        "SELECT queue FROM waiting WHERE queue IS NOT NULL "
        "UNION SELECT queue FROM packed WHERE queue IS NOT NULL ORDER BY 1",
        {}, CURSOR_OPT_GENERIC_PLAN, spi::Planning::kWalkIndexes);
    std::vector<std::string> due;
    for (std::string& queue : queue_names(conn, st, {}))
        if (any_due(conn, queue, until)) due.push_back(std::move(queue));
    return due;
}

PassOutcome run_steps(PassState& state) {
    wait_less_than_deadlock_timeout();
    Installed is = Installed::absent;
    bool stopped = false;
    bool wanted = false;
    bool busy = false;
    try {
        worker::in_transaction([&] {
            // DROP EXTENSION is noticed here: the reaper then exits.
            is = installed();
            if (is != Installed::in_place) return;
            wanted = database_wanted();
            if (wanted) return;
            spi::Connection conn;
            static spi::Statement control("SELECT stopped FROM hopper.reaper_control", {});
            spi::Result c = conn.exec(control, {});
            stopped = !c.empty() && c.get_bool(0, 1);
            conn.finish();
        });
    } catch (const PgError& e) {
        // A table locked by DROP EXTENSION on its way (or other DDL): this pass is skipped, and
        // the next one finds the extension gone, or the table free.
        if (e.sqlstate() != ERRCODE_LOCK_NOT_AVAILABLE) throw;
        busy = true;
    }
    if (busy) return PassOutcome::skipped;
    if (is == Installed::absent) return PassOutcome::extension_gone;
    if (is == Installed::misplaced) return PassOutcome::misplaced;
    if (stopped) return PassOutcome::stopped;
    if (wanted) return PassOutcome::step_aside;

    const int64_t batch = batch_size;

    // Crashed session-bound workers first: their jobs need no lease to run out. A job whose
    // rescue fails (a trigger of the user's, say) is reported and left; a failure of the step
    // itself is reported and the rest of the pass runs.
    worker::reported("rescuing the jobs of gone sessions", [&] {
        state.rescued += rescue_in_batches(
            batch,
            [&](spi::Connection& conn, rescue::Cursor& after) {
                return rescue::orphaned_sessions(conn, transaction_now(), batch, &after);
            },
            [&](spi::Connection& conn, rescue::Cursor& after) {
                return rescue::orphaned_sessions_one_by_one(conn, transaction_now(), batch, after);
            });
    });

    // Each queue's expired leases, as the orphans above: the queues that have any, found in one
    // statement. One queue whose rescue fails otherwise is reported and passed over: the other
    // queues' expired leases, the schedules and the pruning still run. A cancel or shutdown ends
    // the pass as before.
    // Reported, as each step is: a lookup that times out (its index being rebuilt) is retried at
    // the next pass and does not end this one.
    std::vector<std::string> expired;
    worker::reported("finding the queues with expired leases", [&] {
        worker::in_transaction([&] {
            spi::Connection conn;
            expired = queues_with_expired_leases(conn, transaction_now());
            conn.finish();
        });
    });
    for (const std::string& queue : expired) {
        worker::reported("rescuing the expired leases of queue \"" + queue + "\"", [&] {
            state.rescued += rescue_in_batches(
                batch,
                [&](spi::Connection& conn, rescue::Cursor& after) {
                    return rescue::expired_leases(conn, queue, transaction_now(), batch, after);
                },
                [&](spi::Connection& conn, rescue::Cursor& after) {
                    return rescue::expired_leases_one_by_one(conn, queue, transaction_now(), batch,
                                                             after);
                });
        });
        check_for_interrupts();
    }

    // Queues whose packed rows are all gone go back to the claims that read hopper.jobs alone.
    worker::reported("updating the queues' packed marks", [&] {
        worker::in_transaction([&] {
            spi::Connection conn;
            static spi::Statement drained(
                "SELECT name FROM hopper.queues q WHERE packed "
                "AND NOT EXISTS (SELECT 1 FROM hopper.job_batches b WHERE b.queue = q.name)",
                {}, spi::Planning::kWalkIndexes);
            spi::Result r = conn.exec(drained, {});
            for (uint64_t i = 0; i < r.rows(); ++i)
                batches::unmark_if_drained(conn, r.get_text(i, 1));
            // And the other way: a queue with packed rows whose mark someone cleared by hand (a
            // producer may write it, for its first packed push) would have its claims pass them
            // over for ever. A row held by a push in flight is left to that push.
            // The queues with packed rows are found by a loose scan of job_batches_pull_idx.
            static spi::Statement unmarked(
                "WITH RECURSIVE b(queue) AS ("
                "  (SELECT queue FROM hopper.job_batches ORDER BY queue LIMIT 1) "
                "  UNION ALL "
                "  SELECT (SELECT x.queue FROM hopper.job_batches x WHERE x.queue > b.queue "
                "    ORDER BY x.queue LIMIT 1) FROM b WHERE b.queue IS NOT NULL), "
                "unmarked AS (SELECT m.name FROM hopper.queues m JOIN b ON b.queue = m.name "
                "  WHERE NOT m.packed FOR NO KEY UPDATE OF m SKIP LOCKED) "
                "UPDATE hopper.queues u SET packed = true FROM unmarked WHERE u.name = "
                "unmarked.name",
                {}, spi::Planning::kWalkIndexes);
            conn.exec(unmarked, {});
            conn.finish();
        });
    });

    // Periodic jobs: a transaction per batch of due schedules, each job pushed with its tick. A
    // failure is reported and left for the next pass, as a queue's rescue is: the wake-ups and
    // the pruning below still run. The batches walk the schedules in order and go on while one
    // comes back full: a batch of schedules that all failed (they stay due, first in order) ended
    // the pass before, and the schedules after them never ran.
    worker::reported("running due periodic jobs", [&] {
        schedule::Cursor after;
        in_batches(batch, [&](spi::Connection& conn) {
            return schedule::run_due(conn, transaction_now(), batch, &after,
                                     /*hold_while_restoring=*/true)
                .locked;
        });
    });

    // On the first pass every queue with due jobs is woken: workers may have missed the pushes'
    // NOTIFY while the server (or this reaper) was down. From then on the relay announces pushes.
    if (state.last_due_check == 0) relay_prime();
    // The check moves on only once its notices are committed: the commit may fail (its NOTIFY
    // waits for a lock under this pass's lock_timeout), and the jobs that fell due would then never
    // be announced.
    TimestampTz checked_until = 0;
    worker::in_transaction([&] {
        TimestampTz now = transaction_now();
        bool first = state.last_due_check == 0;
        TimestampTz since = state.last_due_check;
        spi::Connection conn;
        for (const std::string& queue : first ? queues_with_due_jobs(conn, now)
                                              : queues_with_jobs_become_due(conn, since, now))
            notify::queue_ready(queue);
        conn.finish();
        checked_until = now;
    });
    state.last_due_check = checked_until;

    TimestampTz now = GetCurrentTimestamp();
    if (state.last_prune == 0 ||
        now - state.last_prune >= static_cast<int64_t>(prune_interval_s) * USECS_PER_SEC) {
        state.last_prune = now;
        state.pruned += prune_history(batch);
    }
    return PassOutcome::done;
}

}  // namespace

PassOutcome run_pass(PassState& state) {
    try {
        return run_steps(state);
    } catch (const StepAside&) {
        return PassOutcome::step_aside;
    }
}

}  // namespace hopper::reaper
