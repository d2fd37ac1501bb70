// What the direct claim and completion paths read of a queue's row of hopper.queues (paused,
// limited, packed, notify_done, retention, lease), remembered by each backend, so that a
// one-at-a-time worker's call does not open hopper.queues and its primary key and read the row
// afresh each time (4% of a CPU-bound one-at-a-time drain, twice per queue_complete_pull).
//
// Every change to hopper.queues fires its statement trigger (hopper.queues_changed), which sends
// a relcache invalidation of the table (rows are only remembered while its triggers are enabled
// so, queue_defaults::changes_reach_backends); each backend forgets every row when that reaches it,
// and each lookup first takes the invalidations that have arrived. A row read in a transaction that
// then rolls back its own change to the table is forgotten by the same invalidation, which
// PostgreSQL replays in the backend at the rollback. Only rows read through the direct paths are
// remembered, which refuse a hopper.queues with row level security, so no role sees a row another
// role read; SELECT on the table is still checked on every call.
//
// Plain C over PostgreSQL's API: call under pg_guard.
#pragma once

#include <cstdint>

#include "hopper/direct_access.hpp"

namespace hopper::queue_rows {

// Takes the invalidations that have arrived, and returns what remember() needs: call it before
// taking the snapshot that reads of rows will use.
uint64_t accept();

// The queue's row if this backend remembers it.
bool recall(const char* name, int len, direct_access::QueueRow* q);

// Remembers a row read from hopper.queues (`queues`) with a snapshot taken after accept() gave
// `generation`; unless an invalidation arrived since, which the read may predate.
void remember(Oid queues, const char* name, int len, const direct_access::QueueRow& q,
              uint64_t generation);

// The queue's row: recalled, or read from hopper.queues (`queues`) with `snap` and remembered.
// `name_text` is the name as a text Datum, and `generation` what accept() gave before `snap` was
// taken. False (nothing read) if hopper.queues is not as the direct paths expect.
bool lookup(Oid queues, const char* name, int len, Datum name_text, Snapshot snap,
            uint64_t generation, direct_access::QueueRow* q);

}  // namespace hopper::queue_rows
