// Where this backend's leases left their jobs' rows, so that the completion that usually follows
// (queue_complete_pull, queue_complete_many_pull, a worker's queue_complete) reads the row at its
// address instead of descending the primary key to find it.
//
// An address is only a hint: the completion uses it if the version there is visible to its
// snapshot and is the job under the same lease, which makes it the version the primary key would
// have given. Anything else (a heartbeat or a rescue wrote a newer version, the lease rolled back,
// VACUUM freed the slot or truncated the table) sends it to the index as before. The table is
// small and fixed; a newer lease takes an older one's slot.
#pragma once

#include <cstdint>

extern "C" {
#include "postgres.h"
#include "storage/itemptr.h"
}

namespace hopper::lease_rows {

// The lease `token` on job `id` wrote its row at `tid` in table `table`.
void remember(Oid table, int64_t id, int64_t token, ItemPointer tid);

// The address remembered for job `id` under lease `token` in `table`, if any; forgets it.
bool recall(Oid table, int64_t id, int64_t token, ItemPointerData* tid);

}  // namespace hopper::lease_rows
