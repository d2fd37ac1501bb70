// What a push needs of its queue (that it exists, and its max_attempts), remembered by each backend
// so that a push to a queue it knows inserts its job without reading hopper.queues.
//
// Reading the queue in the push's INSERT ... SELECT cost a third of the push's executor work (an
// index scan of hopper.queues to set up and run on every call). Any change to hopper.queues that
// could make a remembered entry wrong (a queue dropped or renamed, its max_attempts changed, or a
// queue created by a transaction that then rolls back) fires a statement trigger that sends a
// relcache invalidation of the table; every backend forgets what it remembered when that reaches
// it, and each lookup first takes the invalidations that have arrived. What a backend remembers is
// per role: the lookup needs what reading hopper.queues through SQL needs (SELECT on it, through
// row level security), and GRANT, REVOKE, policies and role memberships make it forget too.
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

}  // namespace hopper::queue_defaults
