// See include/hopper/direct_insert.hpp.
#include "hopper/direct_access.hpp"
#include "hopper/direct_insert.hpp"
#include "hopper/index_infos.hpp"

extern "C" {
#include "access/genam.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
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
    Relation rel = direct_access::open_table(relid, RowExclusiveLock);
    if (rel == nullptr) return nullptr;
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

namespace {

// Opens the i-th waiting index and adds it to the result relation, as ExecOpenIndices would.
void open_waiting(Inserter* in, int i) {
    ResultRelInfo* rri = in->rri;
    Relation index = index_open(in->waiting[i], RowExclusiveLock);
    IndexInfo* info = in->waiting_info[i];
    if (info == nullptr) info = index_infos::keep(index, RelationGetRelid(rri->ri_RelationDesc));
    if (info == nullptr) info = BuildIndexInfo(index);
    // A kept description is shared by every statement: the "unchanged by this update" hint it
    // caches belongs to one.
    info->ii_CheckedUnchanged = false;
    rri->ri_IndexRelationDescs[rri->ri_NumIndices] = index;
    rri->ri_IndexRelationInfo[rri->ri_NumIndices] = info;
    rri->ri_NumIndices++;
    in->waiting[i] = InvalidOid;
}

}  // namespace

void begin(Relation rel, Inserter* in) {
    in->apart = false;
    in->estate = CreateExecutorState();
    in->caller = MemoryContextSwitchTo(in->estate->es_query_cxt);
    in->rri = result_relation(in->estate, rel);
    in->estate->es_output_cid = GetCurrentCommandId(true);
    in->rri->ri_NumIndices = 0;
    in->n_waiting = 0;
    if (rel->rd_rel->relhasindex) {
        List* indexes = RelationGetIndexList(rel);
        int n = list_length(indexes);
        in->rri->ri_IndexRelationDescs = static_cast<RelationPtr>(palloc(n * sizeof(Relation)));
        in->rri->ri_IndexRelationInfo = static_cast<IndexInfo**>(palloc(n * sizeof(IndexInfo*)));
        in->waiting = static_cast<Oid*>(palloc(n * sizeof(Oid)));
        in->waiting_info = static_cast<IndexInfo**>(palloc(n * sizeof(IndexInfo*)));
        index_infos::refresh();
        ListCell* lc;
        foreach (lc, indexes) {
            Oid index = lfirst_oid(lc);
            in->waiting[in->n_waiting] = index;
            in->waiting_info[in->n_waiting] = index_infos::find(index);
            // An index described per statement, or not yet kept, is opened now.
            if (in->waiting_info[in->n_waiting] == nullptr) open_waiting(in, in->n_waiting);
            in->n_waiting++;
        }
        list_free(indexes);
    }
    in->slot = ExecInitExtraTupleSlot(in->estate, RelationGetDescr(rel), &TTSOpsVirtual);
    ExecClearTuple(in->slot);
}

void begin_apart(Relation rel, Inserter* in) {
    begin(rel, in);
    MemoryContextSwitchTo(in->caller);
    in->apart = true;
}

void open_indexes_for(Inserter* in, TupleTableSlot* row) {
    ExprContext* econtext = GetPerTupleExprContext(in->estate);
    econtext->ecxt_scantuple = row;
    for (int i = 0; i < in->n_waiting; ++i) {
        if (in->waiting[i] == InvalidOid) continue;
        IndexInfo* info = in->waiting_info[i];
        // The tests ExecInsertIndexTuples makes before it inserts, made first.
        if (!info->ii_ReadyForInserts) continue;
        if (info->ii_Predicate != NIL && !ExecQual(info->ii_PredicateState, econtext)) continue;
        open_waiting(in, i);
    }
}

void insert(Inserter* in) {
    ExecStoreVirtualTuple(in->slot);
    open_indexes_for(in, in->slot);
    ExecSimpleRelationInsert(in->rri, in->estate, in->slot);
    ExecClearTuple(in->slot);
    ResetPerTupleExprContext(in->estate);
}

void write_held(Inserter* in, TupleTableSlot** slots, int n) {
    table_multi_insert(in->rri->ri_RelationDesc, slots, n, in->estate->es_output_cid, 0, nullptr);
    for (int i = 0; i < n; ++i) {
        if (in->rri->ri_NumIndices > 0) {
            MemoryContext old = MemoryContextSwitchTo(GetPerTupleMemoryContext(in->estate));
            ExecInsertIndexTuples(in->rri, slots[i], in->estate, false, false, nullptr, NIL);
            MemoryContextSwitchTo(old);
            ResetPerTupleExprContext(in->estate);
        }
        ExecClearTuple(slots[i]);
    }
}

void end(Relation rel, Inserter* in, bool inserted) {
    ExecCloseIndices(in->rri);
    if (!in->apart) MemoryContextSwitchTo(in->caller);
    ExecResetTupleTable(in->estate->es_tupleTable, false);
    FreeExecutorState(in->estate);
    table_close(rel, NoLock);
    if (inserted) CommandCounterIncrement();
}

}  // namespace hopper::direct_insert
