// See include/hopper/index_predicates.hpp.
#include "hopper/index_predicates.hpp"

extern "C" {
#include "executor/executor.h"
#include "optimizer/optimizer.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"
}

namespace hopper::index_predicates {
namespace {

// hopper.jobs has seven partial indexes and hopper.job_batches none; a table with more than this
// many simply prepares the rest per row, as the executor does.
constexpr int kMaxKept = 16;

struct Kept {
    Oid index;
    Oid table;
    ExprState* predicate;
};

Kept kept[kMaxKept];
int n_kept = 0;
MemoryContext kept_context = nullptr;
bool callback_registered = false;
// Set by an invalidation; the predicates are dropped at the next prepare(). Not at once: an
// invalidation is read whenever the backend first takes a lock in a transaction, which can be in
// the middle of an insert that holds the predicates (the id sequence's lock, taken after
// prepare()).
bool stale = false;

void on_relcache_invalidation(Datum, Oid relid) {
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

ExprState* lookup(Oid index) {
    for (int i = 0; i < n_kept; ++i)
        if (kept[i].index == index) return kept[i].predicate;
    return nullptr;
}

}  // namespace

void prepare(ResultRelInfo* rri) {
    if (!callback_registered) {
        CacheRegisterRelcacheCallback(on_relcache_invalidation, (Datum)0);
        callback_registered = true;
    }
    if (kept_context == nullptr)
        kept_context = AllocSetContextCreate(TopMemoryContext, "hopper index predicates",
                                             ALLOCSET_SMALL_SIZES);
    if (stale) {
        n_kept = 0;
        MemoryContextReset(kept_context);
        stale = false;
    }
    Oid table = RelationGetRelid(rri->ri_RelationDesc);
    for (int i = 0; i < rri->ri_NumIndices; ++i) {
        IndexInfo* info = rri->ri_IndexRelationInfo[i];
        if (info == nullptr || info->ii_Predicate == NIL || info->ii_PredicateState != nullptr)
            continue;
        Oid index = RelationGetRelid(rri->ri_IndexRelationDescs[i]);
        ExprState* predicate = lookup(index);
        if (predicate == nullptr && n_kept < kMaxKept) {
            MemoryContext old = MemoryContextSwitchTo(kept_context);
            predicate =
                ExecInitQual(reinterpret_cast<List*>(expression_planner(
                                 reinterpret_cast<Expr*>(copyObjectImpl(info->ii_Predicate)))),
                             nullptr);
            MemoryContextSwitchTo(old);
            kept[n_kept++] = Kept{index, table, predicate};
        }
        info->ii_PredicateState = predicate;  // still null past kMaxKept: prepared per row
    }
}

}  // namespace hopper::index_predicates
