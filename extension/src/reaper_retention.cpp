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

}  // namespace

uint64_t prune_history(int64_t batch) {
    uint64_t pruned = 0;

    worker::in_transaction([&] {
        spi::Connection conn;
        short_lock_timeout(conn);
        static spi::Statement ensure("SELECT hopper.ensure_history_partitions(7)", {});
        conn.exec(ensure, {});
        conn.finish();
    });

    // Daily partitions (named job_history_pYYYYMMDD by ensure_history_partitions, covering that
    // UTC day) that lie wholly before now minus the longest retention of any queue.
    std::vector<std::string> expired;
    worker::in_transaction([&] {
        spi::Connection conn;
        static spi::Statement st(
            "WITH longest AS ("
            "  SELECT COALESCE(pg_catalog.max(retention), interval '7 days') AS r FROM "
            "hopper.queues) "
            "SELECT c.relname::text FROM pg_catalog.pg_inherits i "
            "JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent = 'hopper.job_history'::pg_catalog.regclass "
            "  AND c.relname ~ '^job_history_p[0-9]{8}$' "
            "  AND (pg_catalog.to_date(pg_catalog.substr(c.relname, 14), 'YYYYMMDD') + "
            "1)::timestamp "
            "      AT TIME ZONE 'UTC' <= pg_catalog.now() - (SELECT r FROM longest) "
            "ORDER BY 1",
            {});
        spi::Result r = conn.exec(st, {});
        for (uint64_t i = 0; i < r.rows(); ++i) expired.push_back(r.get_text(i, 1));
        conn.finish();
    });
    for (const std::string& part : expired) {
        uint64_t rows = 0;
        worker::in_transaction([&] {
            spi::Connection conn;
            short_lock_timeout(conn);
            // The name comes from the catalog and matched the pattern above; quoted all the same.
            std::string table = qualified(part);
            rows = exec_once("SELECT pg_catalog.count(*) FROM " + table);
            exec_once("DROP TABLE " + table);
            conn.finish();
        });
        pruned += rows;
    }

    // Rows past their own queue's retention: queues with a shorter retention than the longest,
    // days still in a partition that also holds younger rows, and the default partition.
    std::vector<std::pair<std::string, TimestampTz>> cutoffs;
    worker::in_transaction([&] {
        spi::Connection conn;
        static spi::Statement st(
            "SELECT name, pg_catalog.now() - retention FROM hopper.queues ORDER BY name", {});
        spi::Result r = conn.exec(st, {});
        for (uint64_t i = 0; i < r.rows(); ++i) {
            bool isnull;
            Datum d = r.datum(i, 2, &isnull);
            cutoffs.emplace_back(r.get_text(i, 1), DatumGetTimestampTz(d));
        }
        conn.finish();
    });
    for (const auto& [queue, cutoff] : cutoffs) {
        for (;;) {
            uint64_t deleted = 0;
            worker::in_transaction([&] {
                spi::Connection conn;
                static spi::Statement st(
                    "WITH doomed AS ("
                    "  SELECT id, finished_at FROM hopper.job_history "
                    "  WHERE queue = $1 AND finished_at < $2 LIMIT $3), "
                    "deleted AS ("
                    "  DELETE FROM hopper.job_history h USING doomed d "
                    "  WHERE h.id = d.id AND h.finished_at = d.finished_at AND h.queue = $1 "
                    "    AND h.finished_at < $2 RETURNING 1) "
                    "SELECT pg_catalog.count(*) FROM deleted",
                    {TEXTOID, TIMESTAMPTZOID, INT8OID});
                spi::Result r =
                    conn.exec(st, {spi::arg_text(queue),
                                   spi::arg_datum(TimestampTzGetDatum(cutoff)), spi::arg(batch)});
                deleted = static_cast<uint64_t>(r.get_int64(0, 1));
                conn.finish();
            });
            pruned += deleted;
            if (deleted < static_cast<uint64_t>(batch)) break;
            pg_guard([] { CHECK_FOR_INTERRUPTS(); });
        }
    }
    return pruned;
}

}  // namespace hopper::reaper
