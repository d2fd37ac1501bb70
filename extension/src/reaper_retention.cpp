// History retention, run by the reaper every hopper.reaper_prune_interval. See
// include/hopper/reaper_pass.hpp.
#include <string>
#include <utility>
#include <vector>

#include "hopper/reaper_pass.hpp"
#include "hopper/spi.hpp"
#include "hopper/worker_txn.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
}

namespace hopper::reaper {
namespace {

// Dropping a partition locks all of hopper.job_history for a moment, and creating one locks its
// default partition: never queue behind (and so in front of) completions for long. A step that
// times out is retried at the next retention run.
void short_lock_timeout(spi::Connection& conn) {
    static spi::Statement st("SELECT pg_catalog.set_config('lock_timeout', '500ms', true)", {});
    conn.exec(st, {});
}

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

}  // namespace

#define HOPPER_EXPIRED_PARTITIONS                                                              \
    "SELECT c.relname::text FROM pg_catalog.pg_inherits i "                                    \
    "JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid "                                        \
    "WHERE i.inhparent = 'hopper.job_history'::pg_catalog.regclass "                           \
    "  AND c.relname ~ '^job_history_p[0-9]{8}$' "                                             \
    "  AND (pg_catalog.to_date(pg_catalog.substr(c.relname, 14), 'YYYYMMDD') + 1)::timestamp " \
    "      AT TIME ZONE 'UTC' <= (SELECT COALESCE("                                            \
    "      pg_catalog.min(pg_catalog.now() - retention), "                                     \
    "      pg_catalog.now() - interval '168 hours') "                                          \
    "      FROM hopper.queues) "

uint64_t prune_history(int64_t batch) {
    uint64_t pruned = 0;

    isolated("creating history partitions", [&] {
        spi::Connection conn;
        short_lock_timeout(conn);
        static spi::Statement ensure("SELECT hopper.ensure_history_partitions(7)", {});
        conn.exec(ensure, {});
        conn.finish();
    });

    // Daily partitions (named job_history_pYYYYMMDD by ensure_history_partitions, covering that
    // UTC day) that end before every queue's cutoff. The cutoff is now() - retention, as the row
    // deletes below reckon it: retentions are fixed lengths (hopper.queues), so the earliest
    // cutoff is the longest retention's, in any TimeZone.
    std::vector<std::string> expired;
    worker::in_transaction([&] {
        spi::Connection conn;
        static spi::Statement st(HOPPER_EXPIRED_PARTITIONS "ORDER BY 1", {});
        spi::Result r = conn.exec(st, {});
        for (uint64_t i = 0; i < r.rows(); ++i) expired.push_back(r.get_text(i, 1));
        conn.finish();
    });
    for (const std::string& part : expired) {
        uint64_t rows = 0;
        isolated("dropping history partition " + part, [&] {
            spi::Connection conn;
            short_lock_timeout(conn);
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
            // Partitions made by CREATE EXTENSION belonged to the extension, which refuses to
            // drop them.
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
            rows = exec_once("SELECT pg_catalog.count(*) FROM " + table);
            exec_once("DROP TABLE " + table);
            conn.finish();
        });
        pruned += rows;
        check_for_interrupts();
    }

    // Rows past their own queue's retention: queues with a shorter retention than the longest,
    // days still in a partition that also holds younger rows, and the default partition.
    std::vector<std::string> queues;
    worker::in_transaction([&] {
        spi::Connection conn;
        static spi::Statement st("SELECT name FROM hopper.queues ORDER BY name", {});
        spi::Result r = conn.exec(st, {});
        for (uint64_t i = 0; i < r.rows(); ++i) queues.push_back(r.get_text(i, 1));
        conn.finish();
    });
    for (const std::string& queue : queues) {
        bool more = true;
        while (more) {
            uint64_t deleted = 0;
            isolated("pruning the history of queue \"" + queue + "\"", [&] {
                spi::Connection conn;
                // Each batch reads the queue's retention afresh and holds its row until it
                // commits: a retention raised meanwhile applies from the next batch on (before,
                // a run went on deleting with the cutoff it began with). A row held by someone
                // else (a limit being set, say) leaves the queue to the next run.
                static spi::Statement st(
                    "WITH q AS (SELECT pg_catalog.now() - retention AS cutoff FROM hopper.queues "
                    "  WHERE name = $1 FOR SHARE SKIP LOCKED), "
                    "doomed AS ("
                    "  SELECT id, finished_at FROM hopper.job_history "
                    "  WHERE queue = $1 AND finished_at < (SELECT cutoff FROM q) LIMIT $2), "
                    "deleted AS ("
                    "  DELETE FROM hopper.job_history h USING doomed d "
                    "  WHERE h.id = d.id AND h.finished_at = d.finished_at AND h.queue = $1 "
                    "    AND h.finished_at < (SELECT cutoff FROM q) RETURNING 1) "
                    "SELECT pg_catalog.count(*) FROM deleted",
                    {TEXTOID, INT8OID});
                spi::Result r = conn.exec(st, {spi::arg_text(queue), spi::arg(batch)});
                deleted = static_cast<uint64_t>(r.get_int64(0, 1));
                conn.finish();
            });
            pruned += deleted;
            more = deleted >= static_cast<uint64_t>(batch);
            check_for_interrupts();
        }
    }
    return pruned;
}

}  // namespace hopper::reaper

#undef HOPPER_EXPIRED_PARTITIONS
