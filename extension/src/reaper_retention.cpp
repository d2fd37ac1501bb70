// History retention, run by the reaper every hopper.reaper_prune_interval. See
// include/hopper/reaper_pass.hpp.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hopper/reaper_pass.hpp"
#include "hopper/spi.hpp"
#include "hopper/subtransaction.hpp"
#include "hopper/worker_txn.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

namespace hopper::reaper {
namespace {

// Runs a statement that names a table (no saved plan: the table is gone afterwards).
uint64_t exec_once(const std::string& sql) {
    return pg_guard([&] {
        int rc = SPI_execute(sql.c_str(), false, 0);
        if (rc < 0) elog(ERROR, "hopper: SPI_execute failed: %s", SPI_result_code_string(rc));
        if (rc == SPI_OK_SELECT && SPI_processed == 1) {
            bool isnull;
            Datum d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
            return isnull ? uint64_t{0} : static_cast<uint64_t>(DatumGetInt64(d));
        }
        return uint64_t{0};
    });
}

std::string qualified(const std::string& relname) {
    const char* quoted = pg_guard([&] { return quote_identifier(relname.c_str()); });
    return std::string("hopper.") + quoted;
}

// One retention step in a transaction of its own (a lock timeout, a partition someone made a
// member of another object): reported and left to the next run, while the other steps run.
template <typename Step>
void isolated(const std::string& what, Step&& step) {
    worker::reported(what, [&] { worker::in_transaction(std::forward<Step>(step)); });
}

// Where a queue's row deletes have got to, in the order of job_history_queue_idx: (state,
// finished_at), and the rows at that place that were passed over. A row a batch passed over (kept
// by a trigger of the user's, or whose delete failed) stays past its retention and first in that
// order: without the cursor a batch full of them ended the queue's pruning at every run. No id
// in the order: a batched completion gives thousands of rows one finished_at, and sorting them
// by id cost a read of them all per batch.
struct HistoryCursor {
    bool started = false;
    std::string state;
    TimestampTz finished_at = 0;
    std::vector<int64_t> passed;  // ids at (state, finished_at) passed over
};

struct PruneCounts {
    uint64_t deleted = 0;
    uint64_t seen = 0;  // rows taken up, deleted or not
};

// Moves the cursor to (state, finished_at), where the rows of ids were passed over.
void move_to(HistoryCursor& after, const std::string& state, TimestampTz finished_at,
             const std::vector<int64_t>& ids) {
    if (!after.started || after.state != state || after.finished_at != finished_at)
        after.passed.clear();
    after.started = true;
    after.state = state;
    after.finished_at = finished_at;
    after.passed.insert(after.passed.end(), ids.begin(), ids.end());
}

// The queue's rows past its retention, in cursor order from `after` on. Each batch reads the
// queue's retention afresh and holds its row until it commits: a retention raised meanwhile
// applies from the next batch on. A row held by someone else (a limit being set, say) leaves the
// queue to the next run. Rows another session holds locked are passed over, not waited for: the
// reaper's other work waited behind them.
#define HOPPER_PRUNE_CUTOFF                                                        \
    "WITH q AS (SELECT pg_catalog.now() - retention AS cutoff FROM hopper.queues " \
    "  WHERE name = $1 FOR SHARE SKIP LOCKED) "
#define HOPPER_PRUNE_DOOMED(past, lock)                                    \
    "SELECT id, finished_at, state, state::pg_catalog.text AS state_name " \
    "FROM hopper.job_history "                                             \
    "WHERE queue = $1 AND finished_at < (SELECT cutoff FROM q) " past      \
    "ORDER BY state, finished_at LIMIT $2 " lock
#define HOPPER_PRUNE_PAST                                     \
    "AND state OPERATOR(pg_catalog.>=) $3::hopper.job_state " \
    "AND (state, finished_at) >= ($3::hopper.job_state, $4) AND NOT (id = ANY ($5)) "
// One row per row passed over at the last place taken up (or one row with a NULL id), each with
// the counts and that place. Those rows are looked for only when some row was not deleted.
#define HOPPER_PRUNE_BATCH(past) \
    HOPPER_PRUNE_CUTOFF ", doomed AS MATERIALIZED (" HOPPER_PRUNE_DOOMED(                    \
        past, "FOR UPDATE SKIP LOCKED") "), "                                                 \
    "deleted AS ("                                                                            \
    "  DELETE FROM hopper.job_history h USING doomed d "                                      \
    "  WHERE h.id = d.id AND h.finished_at = d.finished_at AND h.queue = $1 "                 \
    "    AND h.finished_at < (SELECT cutoff FROM q) RETURNING h.id, h.finished_at), "         \
    "last AS (SELECT d.state, d.state_name, d.finished_at FROM doomed d "                    \
    "  ORDER BY d.state DESC, d.finished_at DESC LIMIT 1) "                                   \
    "SELECT (SELECT pg_catalog.count(*) FROM deleted), (SELECT pg_catalog.count(*) FROM doomed), " \
    "  l.state_name, l.finished_at, p.id FROM (SELECT 1) z LEFT JOIN last l ON true "         \
    "LEFT JOIN LATERAL (SELECT d.id FROM doomed d "                                           \
    "  WHERE (SELECT pg_catalog.count(*) FROM deleted) < (SELECT pg_catalog.count(*) FROM doomed) " \
    "  AND d.state OPERATOR(pg_catalog.=) l.state AND d.finished_at = l.finished_at "         \
    "  AND NOT EXISTS (SELECT 1 FROM deleted x "                                              \
    "    WHERE x.id = d.id AND x.finished_at = d.finished_at)) p ON true"

spi::Result prune_rows(spi::Connection& conn, spi::Statement& first, spi::Statement& next,
                       const std::string& queue, int64_t batch, const HistoryCursor& after) {
    if (!after.started) return conn.exec(first, {spi::arg_text(queue), spi::arg(batch)});
    return conn.exec(next, {spi::arg_text(queue), spi::arg(batch), spi::arg_text(after.state),
                            spi::arg_datum(TimestampTzGetDatum(after.finished_at)),
                            spi::arg_int8_array(after.passed)});
}

PruneCounts prune_batch(spi::Connection& conn, const std::string& queue, int64_t batch,
                        HistoryCursor& after) {
    static spi::Statement first(HOPPER_PRUNE_BATCH(""), {TEXTOID, INT8OID});
    static spi::Statement next(HOPPER_PRUNE_BATCH(HOPPER_PRUNE_PAST),
                               {TEXTOID, INT8OID, TEXTOID, TIMESTAMPTZOID, INT8ARRAYOID});
    spi::Result r = prune_rows(conn, first, next, queue, batch, after);
    PruneCounts c;
    c.deleted = static_cast<uint64_t>(r.get_int64(0, 1));
    c.seen = static_cast<uint64_t>(r.get_int64(0, 2));
    if (r.is_null(0, 3)) return c;
    std::vector<int64_t> passed;
    for (uint64_t i = 0; i < r.rows(); ++i)
        if (!r.is_null(i, 5)) passed.push_back(r.get_int64(i, 5));
    move_to(after, r.get_text(0, 3), r.get_timestamptz(0, 4), passed);
    return c;
}

// The batch again after it failed as a whole, a row at a time, each in a subtransaction: a row
// whose delete fails is logged as a WARNING naming its job and kept; the others go.
PruneCounts prune_one_by_one(spi::Connection& conn, const std::string& queue, int64_t batch,
                             HistoryCursor& after) {
    static spi::Statement first(HOPPER_PRUNE_CUTOFF HOPPER_PRUNE_DOOMED("", ""),
                                {TEXTOID, INT8OID});
    static spi::Statement next(HOPPER_PRUNE_CUTOFF HOPPER_PRUNE_DOOMED(HOPPER_PRUNE_PAST, ""),
                               {TEXTOID, INT8OID, TEXTOID, TIMESTAMPTZOID, INT8ARRAYOID});
    static spi::Statement one(
        HOPPER_PRUNE_CUTOFF
        ", doomed AS MATERIALIZED ("
        "  SELECT id, finished_at FROM hopper.job_history WHERE id = $2 AND finished_at = $3 "
        "    AND queue = $1 AND finished_at < (SELECT cutoff FROM q) FOR UPDATE SKIP LOCKED) "
        "DELETE FROM hopper.job_history h USING doomed d "
        "WHERE h.id = d.id AND h.finished_at = d.finished_at RETURNING 1",
        {TEXTOID, INT8OID, TIMESTAMPTZOID});
    struct Row {
        int64_t id;
        TimestampTz finished_at;
        std::string state;
    };
    std::vector<Row> rows;
    spi::Result r = prune_rows(conn, first, next, queue, batch, after);
    for (uint64_t i = 0; i < r.rows(); ++i)
        rows.push_back({r.get_int64(i, 1), r.get_timestamptz(i, 2), r.get_text(i, 4)});
    PruneCounts c;
    for (const Row& row : rows) {
        bool gone = false;
        std::optional<PgError> failed = in_subtransaction([&] {
            gone = !conn.exec(one, {spi::arg_text(queue), spi::arg(row.id),
                                    spi::arg_datum(TimestampTzGetDatum(row.finished_at))})
                        .empty();
        });
        if (failed)
            pg_guard([&] {
                ereport(WARNING,
                        (errcode(failed->sqlstate()),
                         errmsg("pruning job %lld from the history of queue \"%s\" failed: %s",
                                static_cast<long long>(row.id), queue.c_str(), failed->what()),
                         errhint("Its history row is kept and tried again at the next retention "
                                 "run; the other rows were pruned.")));
            });
        if (failed || !gone) {
            move_to(after, row.state, row.finished_at, {row.id});
        } else {
            ++c.deleted;
            move_to(after, row.state, row.finished_at, {});
        }
    }
    c.seen = rows.size();
    return c;
}

#undef HOPPER_PRUNE_BATCH
#undef HOPPER_PRUNE_PAST
#undef HOPPER_PRUNE_DOOMED
#undef HOPPER_PRUNE_CUTOFF

}  // namespace

// Daily partitions (named job_history_pYYYYMMDD by ensure_history_partitions, covering that UTC
// day), and the time each day ends.
#define HOPPER_DAILY_PARTITIONS                                      \
    "SELECT c.relname::text FROM pg_catalog.pg_inherits i "          \
    "JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid "              \
    "WHERE i.inhparent = 'hopper.job_history'::pg_catalog.regclass " \
    "  AND c.relname ~ '^job_history_p[0-9]{8}$' "
#define HOPPER_DAY_END                                                                   \
    "(pg_catalog.to_date(pg_catalog.substr(c.relname, 14), 'YYYYMMDD') + 1)::timestamp " \
    "AT TIME ZONE 'UTC'"
// Those that end before every queue's cutoff. The cutoff is now() - retention, as the row deletes
// below reckon it: retentions are fixed lengths (hopper.queues), so the earliest cutoff is the
// longest retention's, in any TimeZone.
#define HOPPER_EXPIRED_PARTITIONS                                                  \
    HOPPER_DAILY_PARTITIONS "AND " HOPPER_DAY_END                                  \
                            " <= (SELECT COALESCE("                                \
                            "      pg_catalog.min(pg_catalog.now() - retention), " \
                            "      pg_catalog.now() - interval '168 hours') "      \
                            "      FROM hopper.queues) "
// Those whose day is over.
#define HOPPER_PAST_PARTITIONS HOPPER_DAILY_PARTITIONS "AND " HOPPER_DAY_END " <= pg_catalog.now() "

namespace {

// Whether `table` is a partition of the history that holds no row, read under a snapshot taken
// now: in a transaction of REPEATABLE READ (a database's default_transaction_isolation) the
// transaction's own snapshot would miss rows committed since it began, and the partition would
// be dropped with them. One entry of the primary key, not the first row of the heap: a day whose
// rows of short-retention queues were pruned but for a few of a long one keeps its pages, empty
// ones included, until its last row goes, and a sequential scan would read them on every run to
// find that row; the index loses its entries at the next vacuum.
bool empty_partition(const std::string& table) {
    std::string name = pg_guard([&] { return std::string(quote_literal_cstr(table.c_str())); });
    std::string sql =
        "SELECT 1 FROM pg_catalog.pg_inherits "
        "WHERE inhrelid = pg_catalog.to_regclass(" +
        name +
        ") "
        "AND inhparent = 'hopper.job_history'::pg_catalog.regclass "
        "AND (SELECT 1 FROM ONLY " +
        table + " ORDER BY id, finished_at LIMIT 1) IS NULL";
    return pg_guard([&] {
        SPIPlanPtr plan = SPI_prepare(sql.c_str(), 0, nullptr);
        if (plan == nullptr)
            elog(ERROR, "hopper: SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
        int rc = SPI_execute_snapshot(plan, nullptr, nullptr, GetLatestSnapshot(), InvalidSnapshot,
                                      true, false, 1);
        if (rc != SPI_OK_SELECT)
            elog(ERROR, "hopper: SPI_execute_snapshot failed: %s", SPI_result_code_string(rc));
        bool empty = SPI_processed == 1;
        SPI_freeplan(plan);
        return empty;
    });
}

// Partitions made by CREATE EXTENSION belonged to the extension, which refuses to drop them.
void drop_partition(spi::Connection& conn, const std::string& part, const std::string& table) {
    static spi::Statement member(
        "SELECT 1 FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_extension e "
        "ON d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass "
        "AND d.refobjid = e.oid AND e.extname = 'hopper' "
        "WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass "
        "AND d.objid = ('hopper.' || pg_catalog.quote_ident($1))::pg_catalog.regclass "
        "AND d.deptype = 'e'",
        {TEXTOID});
    if (!conn.exec(member, {spi::arg_text(part)}).empty())
        exec_once("ALTER EXTENSION hopper DROP TABLE " + table);
    exec_once("DROP TABLE " + table);
}

// A past day's partition that holds no row (its rows pruned by their queues' retentions, or none
// finished that day) is dropped whatever the retentions: the longest one alone kept every day's
// partition for as long as it lasts, a queue of '1 year' that finished nothing included, and
// every read of the history that cannot leave days out (a job by id) planned, locked and read
// them all. Looked at without a lock first, so that a day that holds rows costs a descent of its
// primary key, and nothing of the completions. Then, in a transaction of its own, under the
// locks its DROP takes (the history, then the partition, as DROP TABLE takes them): a
// completion that wrote a row there and has not committed holds the history locked, and the
// drop waits for it no longer than the reaper's lock timeout and is left to the next run; one
// that commits before the lock is granted has its row seen by the look that follows, and the
// partition is kept. A finish still to come for that day (its transaction began before midnight:
// a row's finished_at is the finishing transaction's start) finds no range for it and lands in
// hopper.job_history_default, where its queue's retention prunes it.
void drop_if_empty(const std::string& part) {
    std::string table = qualified(part);
    bool empty = false;
    isolated("looking into history partition " + part, [&] {
        spi::Connection conn;
        empty = empty_partition(table);
        conn.finish();
    });
    if (!empty) return;
    isolated("dropping empty history partition " + part, [&] {
        spi::Connection conn;
        exec_once("LOCK TABLE ONLY hopper.job_history, ONLY " + table +
                  " IN ACCESS EXCLUSIVE MODE");
        if (empty_partition(table)) drop_partition(conn, part, table);
        conn.finish();
    });
}

}  // namespace

// Dropping a partition locks all of hopper.job_history for a moment, and creating one locks its
// default partition: the reaper's lock timeout (a quarter of deadlock_timeout, see run_steps)
// keeps them from queueing behind (and so in front of) completions for long. A step that times
// out is retried at the next retention run.
uint64_t prune_history(int64_t batch) {
    uint64_t pruned = 0;

    isolated("creating history partitions", [&] {
        spi::Connection conn;
        static spi::Statement ensure("SELECT hopper.ensure_history_partitions(7)", {});
        conn.exec(ensure, {});
        conn.finish();
    });

    // Past days' partitions: those that end before every queue's cutoff, and the others, which
    // go once they hold no row (drop_if_empty, after the row deletes below).
    std::vector<std::string> expired;
    std::vector<std::string> past;
    worker::in_transaction([&] {
        spi::Connection conn;
        static spi::Statement st("SELECT p.relname, p.relname IN (" HOPPER_EXPIRED_PARTITIONS
                                 ") FROM (" HOPPER_PAST_PARTITIONS ") p(relname) ORDER BY 1",
                                 {});
        spi::Result r = conn.exec(st, {});
        for (uint64_t i = 0; i < r.rows(); ++i)
            (r.get_bool(i, 2) ? expired : past).push_back(r.get_text(i, 1));
        conn.finish();
    });
    for (const std::string& part : expired) {
        uint64_t rows = 0;
        isolated("dropping history partition " + part, [&] {
            spi::Connection conn;
            // Every queue's row held until the drop commits, and the cutoff read again under
            // them: a retention raised since the list was made keeps the partition, and one
            // raised now waits for the drop.
            static spi::Statement hold("SELECT 1 FROM hopper.queues FOR SHARE", {});
            conn.exec(hold, {});
            static spi::Statement still(HOPPER_EXPIRED_PARTITIONS "AND c.relname = $1", {TEXTOID});
            if (conn.exec(still, {spi::arg_text(part)}).empty()) {
                conn.finish();
                return;
            }
            // The name comes from the catalog and matched the pattern above; quoted all the same.
            std::string table = qualified(part);
            rows = exec_once("SELECT pg_catalog.count(*) FROM " + table);
            drop_partition(conn, part, table);
            conn.finish();
        });
        pruned += rows;
        check_for_interrupts();
    }
    // Rows past their own queue's retention: queues with a shorter retention than the longest,
    // days still in a partition that also holds younger rows, and the default partition. Only
    // the queues that have such rows, found in one statement: a loose scan of
    // job_history_queue_idx (one descent per queue with any history, none for the others), then
    // per queue a descent per state to its oldest row. Before, every queue cost a transaction
    // that took its row FOR SHARE, a commit to disk each: minutes for a few 100,000 queues.
    std::vector<std::string> queues;
    worker::in_transaction([&] {
        spi::Connection conn;
        static spi::Statement st(
            "WITH RECURSIVE kept(queue) AS ("
            "  (SELECT queue FROM hopper.job_history ORDER BY queue LIMIT 1) "
            "  UNION ALL "
            "  SELECT (SELECT h.queue FROM hopper.job_history h WHERE h.queue > k.queue "
            "    ORDER BY h.queue LIMIT 1) FROM kept k WHERE k.queue IS NOT NULL) "
            "SELECT k.queue FROM kept k JOIN hopper.queues q ON q.name = k.queue "
            "WHERE EXISTS (SELECT 1 FROM pg_catalog.unnest("
            "    pg_catalog.enum_range(NULL::hopper.job_state)) s(state) "
            "  CROSS JOIN LATERAL (SELECT 1 FROM hopper.job_history h WHERE h.queue = k.queue "
            "    AND h.state OPERATOR(pg_catalog.=) s.state "
            "    AND h.finished_at < pg_catalog.now() - q.retention LIMIT 1) x) "
            "ORDER BY 1",
            {}, spi::Planning::kWalkIndexes);
        spi::Result r = conn.exec(st, {});
        for (uint64_t i = 0; i < r.rows(); ++i) queues.push_back(r.get_text(i, 1));
        conn.finish();
    });
    for (const std::string& queue : queues) {
        HistoryCursor after;
        bool more = true;
        while (more) {
            uint64_t deleted = 0;
            uint64_t seen = 0;
            HistoryCursor moved = after;
            // A batch that fails as a whole (a trigger of the user's refusing one row's delete)
            // is run again a row at a time, and the cursor walks past the rows that fail: before,
            // such a row undid its batch at every run, and none of the queue's history after it
            // was ever pruned. Any other failure leaves the queue to the next run.
            if (!worker::committed([&] {
                    spi::Connection conn;
                    PruneCounts c = prune_batch(conn, queue, batch, moved);
                    deleted = c.deleted;
                    seen = c.seen;
                    conn.finish();
                })) {
                moved = after;
                deleted = seen = 0;
                isolated("pruning the history of queue \"" + queue + "\"", [&] {
                    spi::Connection conn;
                    PruneCounts c = prune_one_by_one(conn, queue, batch, moved);
                    deleted = c.deleted;
                    seen = c.seen;
                    conn.finish();
                });
            }
            after = moved;
            pruned += deleted;
            more = seen >= static_cast<uint64_t>(batch);
            check_for_interrupts();
        }
    }

    // Last, so that a day whose last rows went above goes in the same run.
    for (const std::string& part : past) {
        drop_if_empty(part);
        check_for_interrupts();
    }
    return pruned;
}

}  // namespace hopper::reaper

#undef HOPPER_PAST_PARTITIONS
#undef HOPPER_EXPIRED_PARTITIONS
#undef HOPPER_DAY_END
#undef HOPPER_DAILY_PARTITIONS
