// Job lookups for the paths where a call matched no running job, and the table itself.
#pragma once

#include <cstdint>
#include <string>

#include "hopper/spi.hpp"

namespace hopper::jobs {

// hopper.jobs, or InvalidOid once the extension is gone.
Oid relation();

// The job's state wherever it is ("available", "running", "completed", ...); raises P0002 when no
// job with this id exists (never did, or was pruned from history).
std::string state_of(spi::Connection& conn, int64_t id);

// Whether the id job_id_seq handed out is known: `unknown` where it was not asked, or the caller
// may not read the sequence.
enum class Issued { unknown, yes, no };

// The P0002 error for an id that names no job here any more. For an id issued its DETAIL begins
// with kIssuedDetail, which tells a job that may have finished unkept from an id never handed
// out: job_status raises it so, and the client's wait_for reads it. Its HINT names the causes
// that can apply: an id never issued is no job that finished and was pruned.
inline constexpr const char* kIssuedDetail = "The id was issued";
PgError unknown_job(int64_t id, Issued issued = Issued::unknown);

// Whether the sequence handed this id out (HOPPER_MAY_BE_UNKEPT): a job found nowhere may then
// have finished on a queue that keeps no history.
Issued issued(spi::Connection& conn, int64_t id);

// For a call that matched no running job: raises P0002 when no job with this id exists, and
// returns when it exists in any state or may have finished in a queue that keeps no history
// (HOPPER_MAY_BE_UNKEPT), where the caller's lease is lost all the same.
void require_known(spi::Connection& conn, int64_t id);

}  // namespace hopper::jobs
