// Completions made straight through the table and index access methods (as claims are, see
// include/hopper/direct_claim.hpp): each job found by its primary key, fenced by its lease token,
// locked (waiting, as the DELETE would), re-checked on its newest version, deleted, and copied
// to history if its queue keeps finished jobs.
//
// The completion statement builds a DELETE, a history INSERT and two lookups of hopper.queues on
// every call; for one job that is most of its cost. What the direct path does not handle (a table
// that direct_insert::defers_to_sql, privileges granted per column only, a column it does not
// know, a read-only transaction, REPEATABLE READ or SERIALIZABLE: see direct_access::find_tables)
// sends the caller back to its statement.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

extern "C" {
#include "postgres.h"
}

namespace hopper::direct_complete {

struct Item {
    int64_t id;
    int64_t token;
    Datum result;  // jsonb
    bool result_null;
};

struct Done {
    bool done = false;  // completed here; false: no running job with this id holds this token
    std::string queue;
    bool notify_done = false;  // the queue announces finished jobs
    bool limited = false;      // the queue has limits: the job's slot comes free at commit
};

// Completes each item's job if its lease still holds, in order; an id completed once is not
// completed again. nullopt: the statement must do it, and nothing was changed.
std::optional<std::vector<Done>> complete(const std::vector<Item>& items);

}  // namespace hopper::direct_complete
