// See include/hopper/direct_insert.hpp.
#include "hopper/direct_insert.hpp"
#include "hopper/index_predicates.hpp"

extern "C" {
#include "access/table.h"
#include "access/xact.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "utils/acl.h"
#include "utils/rel.h"
}

namespace hopper::direct_insert {

bool defers_to_sql(Relation rel) {
    TupleDesc desc = RelationGetDescr(rel);
    return rel->rd_rel->relrowsecurity || rel->trigdesc != nullptr || rel->rd_rel->relhasrules ||
           (desc->constr && desc->constr->has_generated_stored);
}

Relation open_plain(Oid relid) {
    if (pg_class_aclmask(relid, GetUserId(), ACL_INSERT | ACL_SELECT, ACLMASK_ALL) !=
        (ACL_INSERT | ACL_SELECT))
        return nullptr;
    Relation rel = table_open(relid, RowExclusiveLock);
    if (rel->rd_rel->relkind != RELKIND_RELATION || defers_to_sql(rel)) {
        table_close(rel, NoLock);
        return nullptr;
    }
    return rel;
}

ResultRelInfo* result_relation(EState* estate, Relation rel) {
    RangeTblEntry* rte = makeNode(RangeTblEntry);
    rte->rtekind = RTE_RELATION;
    rte->relid = RelationGetRelid(rel);
    rte->relkind = rel->rd_rel->relkind;
    rte->rellockmode = RowExclusiveLock;
    rte->requiredPerms = ACL_INSERT;
    ExecInitRangeTable(estate, list_make1(rte));
    ResultRelInfo* rri = makeNode(ResultRelInfo);
    InitResultRelInfo(rri, rel, 1, nullptr, 0);
    return rri;
}

void begin(Relation rel, Inserter* in) {
    in->estate = CreateExecutorState();
    in->caller = MemoryContextSwitchTo(in->estate->es_query_cxt);
    in->rri = result_relation(in->estate, rel);
    in->estate->es_output_cid = GetCurrentCommandId(true);
    ExecOpenIndices(in->rri, false);
    index_predicates::prepare(in->rri);
    in->slot = ExecInitExtraTupleSlot(in->estate, RelationGetDescr(rel), &TTSOpsVirtual);
    ExecClearTuple(in->slot);
}

void insert(Inserter* in) {
    ExecStoreVirtualTuple(in->slot);
    ExecSimpleRelationInsert(in->rri, in->estate, in->slot);
    ExecClearTuple(in->slot);
    ResetPerTupleExprContext(in->estate);
}

void end(Relation rel, Inserter* in, bool inserted) {
    ExecCloseIndices(in->rri);
    MemoryContextSwitchTo(in->caller);
    ExecResetTupleTable(in->estate->es_tupleTable, false);
    FreeExecutorState(in->estate);
    table_close(rel, NoLock);
    if (inserted) CommandCounterIncrement();
}

}  // namespace hopper::direct_insert
