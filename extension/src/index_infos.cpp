// See include/hopper/index_infos.hpp.
#include "hopper/index_infos.hpp"
#include "hopper/relcache_watch.hpp"

extern "C" {
#include "access/htup_details.h"
#include "catalog/index.h"
#include "catalog/pg_index.h"
#include "catalog/pg_am_d.h"
#include "executor/executor.h"
#include "optimizer/optimizer.h"
#include "utils/memutils.h"
#include "utils/rel.h"
}

namespace hopper::index_infos {
namespace {

// hopper.jobs has eight indexes, hopper.job_batches three and each history partition three (a
// backend writes today's, then tomorrow's); past this many the rest are described per statement,
// as the executor does.
constexpr int kMaxKept = 32;

struct Kept {
    Oid index;
    Oid table;
    IndexInfo* info;
};

Kept kept[kMaxKept];
int n_kept = 0;
MemoryContext kept_context = nullptr;
bool callback_registered = false;
// Set by an invalidation; the descriptions are dropped at the next refresh(). Not at once: an
// invalidation is read whenever the backend first takes a lock in a transaction, which can be in
// the middle of a write that holds the descriptions (the id sequence's lock, an index's lock).
bool stale = false;

void on_relcache_invalidation(Oid relid) {
    if (relid == InvalidOid) {
        stale = true;
        return;
    }
    for (int i = 0; i < n_kept; ++i)
        if (kept[i].index == relid || kept[i].table == relid) {
            stale = true;
            return;
        }
}

}  // namespace

void refresh() {
    if (!callback_registered) {
        relcache_watch::subscribe(on_relcache_invalidation);
        callback_registered = true;
    }
    if (stale && kept_context != nullptr) {
        // A write of this transaction may still hold the old descriptions (one nested in
        // another's CHECK constraint, say): they are freed when the transaction ends.
        MemoryContextSetParent(kept_context, TopTransactionContext);
        kept_context = nullptr;
    }
    if (kept_context == nullptr)
        kept_context = AllocSetContextCreate(TopMemoryContext, "hopper index descriptions",
                                             ALLOCSET_SMALL_SIZES);
    if (stale) {
        n_kept = 0;
        stale = false;
    }
}

IndexInfo* find(Oid index) {
    for (int i = 0; i < n_kept; ++i)
        if (kept[i].index == index) return kept[i].info;
    return nullptr;
}

IndexInfo* keep(Relation index, Oid table) {
    if (n_kept == kMaxKept || kept_context == nullptr || index->rd_rel->relam != BTREE_AM_OID ||
        index->rd_index->indisexclusion ||
        !heap_attisnull(index->rd_indextuple, Anum_pg_index_indexprs, nullptr))
        return nullptr;
    MemoryContext old = MemoryContextSwitchTo(kept_context);
    IndexInfo* info = BuildIndexInfo(index);
    if (info->ii_Predicate != NIL)
        info->ii_PredicateState = ExecInitQual(
            reinterpret_cast<List*>(
                expression_planner(reinterpret_cast<Expr*>(copyObjectImpl(info->ii_Predicate)))),
            nullptr);
    MemoryContextSwitchTo(old);
    kept[n_kept++] = Kept{RelationGetRelid(index), table, info};
    return info;
}

}  // namespace hopper::index_infos
