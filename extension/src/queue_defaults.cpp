// See include/hopper/queue_defaults.hpp.
#include <cstring>
#include <unordered_map>

#include "hopper/queue_defaults.hpp"
#include "hopper/relcache_watch.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/rls.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"
}

namespace hopper::queue_defaults {
namespace {

// A backend pushes to a handful of queues; past this many the memory starts over rather than grow
// without bound in a session that pushes to ever new names.
constexpr size_t kMaxRemembered = 1024;

// Remembered per role as well as per queue: the lookup runs with the privileges of the role that
// pushes, which SET ROLE or a SECURITY DEFINER function changes. Nothing is remembered while row
// level security applies to that role on hopper.queues: a policy may read more than the role
// (current_setting('app.tenant'), the time), and only a lookup per push asks it every time.
struct Key {
    Oid role;
    std::string queue;
    bool operator==(const Key& o) const { return role == o.role && queue == o.queue; }
};
struct KeyHash {
    size_t operator()(const Key& k) const noexcept {
        return std::hash<std::string>()(k.queue) * 31 + k.role;
    }
};
std::unordered_map<Key, int32_t, KeyHash> remembered;
// hopper.queues as last looked up (InvalidOid: not yet, or forgotten with the entries).
Oid queues_relid = InvalidOid;
// Moves with every invalidation: a lookup whose read may predate one does not remember its result.
uint64_t generation = 0;
bool callback_registered = false;

void forget() noexcept {
    remembered.clear();
    queues_relid = InvalidOid;
    ++generation;
}

// GRANT and REVOKE on the table, row level security policies and the table's own changes all
// invalidate its relcache entry. Any other invalidation still moves the generation: with nothing
// remembered hopper.queues is unknown here, and its invalidation can arrive during a lookup (as
// the executor locks an index) whose snapshot was taken before the change committed.
void on_relcache_invalidation(Oid relid) {
    if (relid == InvalidOid || relid == queues_relid)
        forget();
    else
        ++generation;
}

// A role granted or revoked can change what a role may read through its memberships, and a role
// altered (SUPERUSER, BYPASSRLS) what it may read itself.
void on_role_change(Datum, int, uint32) {
    forget();
}

}  // namespace

std::optional<int32_t> known(const std::string& queue) {
    if (remembered.empty()) return std::nullopt;
    pg_guard([] { AcceptInvalidationMessages(); });
    auto it = remembered.find(Key{GetUserId(), queue});
    if (it == remembered.end()) return std::nullopt;
    return it->second;
}

std::optional<int32_t> look_up(spi::Connection& conn, const std::string& queue) {
    static spi::Statement st("SELECT max_attempts FROM hopper.queues WHERE name = $1", {TEXTOID});
    if (!callback_registered) {
        pg_guard([] {
            relcache_watch::subscribe(on_relcache_invalidation);
            CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, on_role_change, (Datum)0);
            CacheRegisterSyscacheCallback(AUTHOID, on_role_change, (Datum)0);
        });
        callback_registered = true;
    }
    uint64_t before = generation;
    Oid relid =
        pg_guard([] { return get_relname_relid("queues", get_namespace_oid("hopper", false)); });
    spi::Result r = conn.exec(st, {spi::arg_text(queue)});
    if (r.empty()) return std::nullopt;
    int32_t max_attempts = r.get_int32(0, 1);
    // The generation is compared last: reading the triggers may rebuild the relcache entry. A
    // transaction snapshot may predate a change whose invalidation came before the lookup: what
    // it read is right for this transaction only.
    if (OidIsValid(relid) && !IsolationUsesXactSnapshot() && pg_guard([relid] {
            return changes_reach_backends(relid) &&
                   check_enable_rls(relid, InvalidOid, true) != RLS_ENABLED;
        }) &&
        generation == before) {
        if (remembered.size() >= kMaxRemembered) remembered.clear();
        queues_relid = relid;
        remembered.emplace(Key{GetUserId(), queue}, max_attempts);
    }
    return max_attempts;
}

bool changes_reach_backends(Oid relid) {
    Relation rel = RelationIdGetRelation(relid);
    if (!RelationIsValid(rel)) return false;
    // Fires for changes made in the ordinary way ('O', 'A') or under replica ('R', 'A').
    static const char* const kOrigin[] = {"queues_inserted", "queues_updated", "queues_deleted",
                                          "queues_truncated"};
    constexpr int kOrigins = sizeof(kOrigin) / sizeof(kOrigin[0]);
    int origin_firing = 0;
    bool replica_rows = false, replica_truncate = false;
    const TriggerDesc* td = rel->trigdesc;
    for (int i = 0; td != nullptr && i < td->numtriggers; ++i) {
        const Trigger& t = td->triggers[i];
        const char* name = t.tgname;
        bool origin = false;
        for (const char* o : kOrigin) origin = origin || std::strcmp(name, o) == 0;
        if (origin) {
            if (t.tgenabled == TRIGGER_FIRES_ON_ORIGIN || t.tgenabled == TRIGGER_FIRES_ALWAYS)
                ++origin_firing;
        } else if (std::strcmp(name, "queues_changed_replica") == 0)
            replica_rows =
                t.tgenabled == TRIGGER_FIRES_ON_REPLICA || t.tgenabled == TRIGGER_FIRES_ALWAYS;
        else if (std::strcmp(name, "queues_truncated_replica") == 0)
            replica_truncate =
                t.tgenabled == TRIGGER_FIRES_ON_REPLICA || t.tgenabled == TRIGGER_FIRES_ALWAYS;
    }
    RelationClose(rel);
    return origin_firing == kOrigins && replica_rows && replica_truncate;
}

}  // namespace hopper::queue_defaults

using namespace hopper;

// AFTER any change to hopper.queues (per statement, and per row under session_replication_role =
// replica, where apply fires row triggers only): makes every backend forget the queues it knows.
// A statement whose transition table is empty changed no row (an UPDATE or DELETE that matched
// none, an INSERT whose rows all met ON CONFLICT DO NOTHING): nothing to forget. Invalidating for
// it too flushed every backend's memory of the queues at each reaper pass.
HOPPER_FUNCTION(hopper_queues_changed) {
    if (!CALLED_AS_TRIGGER(fcinfo))
        throw PgError(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED,
                      "hopper.queues_changed() must be called as a trigger");
    auto* trigger = reinterpret_cast<TriggerData*>(fcinfo->context);
    Tuplestorestate* rows =
        trigger->tg_newtable != nullptr ? trigger->tg_newtable : trigger->tg_oldtable;
    if (TRIGGER_FIRED_FOR_STATEMENT(trigger->tg_event) && rows != nullptr &&
        pg_guard([rows] { return tuplestore_tuple_count(rows); }) == 0)
        return PointerGetDatum(nullptr);
    pg_guard([&] { CacheInvalidateRelcache(trigger->tg_relation); });
    return PointerGetDatum(nullptr);
}
