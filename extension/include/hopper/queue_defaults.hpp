// What a push needs of its queue (that it exists, and its max_attempts), remembered by each backend
// so that a push to a queue it knows inserts its job without reading hopper.queues.
//
// Reading the queue in the push's INSERT ... SELECT cost a third of the push's executor work (an
// index scan of hopper.queues to set up and run on every call). Any change to hopper.queues that
// could make a remembered entry wrong (a queue dropped or renamed, its max_attempts changed, or a
// queue created by a transaction that then rolls back) fires a statement trigger that sends a
// relcache invalidation of the table (a statement that changed no row sends none); every backend
// forgets what it remembered when that reaches it, and each lookup first takes the invalidations
// that have arrived. What a backend remembers is per role: the lookup needs what reading
// hopper.queues through SQL needs (SELECT on it, through row level security), and GRANT, REVOKE,
// policies and role memberships make it forget too.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "hopper/spi.hpp"

namespace hopper::queue_defaults {

// The queue's max_attempts if this backend knows the queue, after taking pending invalidations.
std::optional<int32_t> known(const std::string& queue);

// Reads the queue from hopper.queues and remembers it. nullopt: no such queue.
std::optional<int32_t> look_up(spi::Connection& conn, const std::string& queue);

// Whether every change to hopper.queues (`relid`) reaches the backends that remember its rows
// (this file's memory, queue_rows.hpp's): its triggers queues_inserted, queues_updated,
// queues_deleted and queues_truncated fire for changes made in the ordinary way, and
// queues_changed_replica and queues_truncated_replica for changes made with
// session_replication_role = replica (a subscription's apply). ALTER TABLE ... ENABLE TRIGGER ALL,
// which pg_restore --disable-triggers runs after loading data, makes the replica ones fire in the
// ordinary way only, and a replicated pause would then go unnoticed. While it is so, nothing is
// remembered and every call reads the table. Read from the relcache entry's triggers, where a
// memory is filled: a trigger enabled or disabled invalidates the entry, and with it every memory.
// Plain C over PostgreSQL's API: call under pg_guard, with the table locked.
bool changes_reach_backends(Oid relid);

}  // namespace hopper::queue_defaults
