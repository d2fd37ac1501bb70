// The descriptions (IndexInfo) of the indexes the direct writes (include/hopper/direct_insert.hpp)
// insert into, built once per backend instead of once per statement.
//
// The executor opens every index of a table for each statement (ExecOpenIndices), builds each
// one's IndexInfo, and prepares each partial index's predicate the first time a row meets it
// (expression_planner, then ExecInitQual). A direct write is one statement per push or claim, and
// hopper.jobs has eight indexes, seven of them partial, of which a row goes into two or three:
// opening, describing and closing the other five cost more than the entries themselves. With the
// descriptions kept here, a direct write tests each predicate first and opens only the indexes
// its rows go into. They are dropped, at the next refresh(), after any relcache invalidation of
// the table or of one of its indexes (CREATE or DROP INDEX, REINDEX, ANALYZE, ...).
//
// Plain C over PostgreSQL's API: call these under pg_guard.
#pragma once

extern "C" {
#include "postgres.h"
#include "nodes/execnodes.h"
#include "utils/relcache.h"
}

namespace hopper::index_infos {

// Drops the kept descriptions if an invalidation came since the last call; those already handed
// out stay valid until the end of the transaction. Call it with the table locked (which reads the
// invalidations), before find().
void refresh();

// The kept description of index `index`, its predicate prepared; nullptr if none is kept.
IndexInfo* find(Oid index);

// Builds, keeps and returns the description of `index`, an open index of table `table`; nullptr
// if it cannot be kept: not a B-tree, or with expression columns or an exclusion constraint (the
// executor keeps state for those in the IndexInfo, per statement), or past the limit.
IndexInfo* keep(Relation index, Oid table);

}  // namespace hopper::index_infos
