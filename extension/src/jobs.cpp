// See include/hopper/jobs.hpp.
#include "hopper/batches.hpp"
#include "hopper/jobs.hpp"

#include "hopper/sql.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
}

// A waiting job of a packed row is available. A LIMIT 1 subquery, not an EXISTS: EXISTS drops the
// ORDER BY, and the walk could then start from the lowest row instead of at the id.
#define HOPPER_PACKED_STATE_OF_ID \
    "SELECT 'available' FROM hopper.job_batches b " HOPPER_PACKED_ROW_OF("b", "$1")

namespace hopper::jobs {

Oid relation() {
    return pg_guard([] {
        Oid ns = get_namespace_oid("hopper", true);
        return OidIsValid(ns) ? get_relname_relid("jobs", ns) : InvalidOid;
    });
}

PgError unknown_job(int64_t id, Issued issued) {
    return PgError(
        ERRCODE_NO_DATA_FOUND, "job " + std::to_string(id) + " does not exist",
        issued == Issued::yes
            ? std::string(kIssuedDetail) +
                  ": the job finished on a queue that keeps no history (or its history was "
                  "pruned, or its queue dropped), or the push that drew the id did not commit."
            : std::string(),
        issued == Issued::no ? "No push has drawn this id yet: check the id."
        : issued == Issued::yes
            ? "It finished and its queue's retention no longer keeps it, or it was never pushed."
            : "It never existed, or it finished and its queue's retention no longer keeps it.");
}

Issued issued(spi::Connection& conn, int64_t id) {
    // Read with the caller's rights: a caller who may not read the sequence cannot tell, and gets
    // the plain answer rather than a permission error.
    bool readable = pg_guard([] {
        Oid ns = get_namespace_oid("hopper", true);
        Oid seq = OidIsValid(ns) ? get_relname_relid("job_id_seq", ns) : InvalidOid;
        return OidIsValid(seq) && pg_class_aclcheck(seq, GetUserId(), ACL_SELECT) == ACLCHECK_OK;
    });
    if (!readable) return Issued::unknown;
    static spi::Statement st("SELECT " HOPPER_MAY_BE_UNKEPT("$1"), {INT8OID});
    spi::Result r = conn.exec(st, {spi::arg(id)});
    return r.get_bool(0, 1) ? Issued::yes : Issued::no;
}

std::string state_of(spi::Connection& conn, int64_t id) {
    static spi::Statement st("SELECT " HOPPER_REPORTED_STATE_AT(HOPPER_CLOCK)
                             " FROM hopper.jobs WHERE id = $1 "
                             "UNION ALL SELECT state::text FROM hopper.job_history WHERE id = $1 "
                             "UNION ALL (" HOPPER_PACKED_STATE_OF_ID ") LIMIT 1",
                             {INT8OID}, spi::Planning::kWalkIndexes);
    spi::Result r = conn.exec(st, {spi::arg(id)});
    // As job_status says it: whether the id was issued tells a job that finished unkept from a
    // wrong id.
    if (r.empty()) throw unknown_job(id, issued(conn, id));
    return r.get_text(0, 1);
}

void require_known(spi::Connection& conn, int64_t id) {
    static spi::Statement st(
        "SELECT EXISTS (SELECT 1 FROM hopper.jobs WHERE id = $1) "
        "OR EXISTS (SELECT 1 FROM hopper.job_history WHERE id = $1) "
        "OR (" HOPPER_PACKED_STATE_OF_ID ") IS NOT NULL OR " HOPPER_MAY_BE_UNKEPT("$1"),
        {INT8OID}, spi::Planning::kWalkIndexes);
    spi::Result r = conn.exec(st, {spi::arg(id)});
    // Found nowhere and beyond the sequence: never issued.
    if (!r.get_bool(0, 1)) throw unknown_job(id, Issued::no);
}

}  // namespace hopper::jobs

#undef HOPPER_PACKED_STATE_OF_ID
