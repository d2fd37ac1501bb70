// The partial-index predicates of the tables the direct inserts write (include/hopper/
// push_insert.hpp, batch_insert.hpp), prepared once per backend instead of once per row.
//
// An insert checks each partial index's predicate to know whether the row goes in. The executor
// prepares those predicates (expression_planner, then ExecInitQual) the first time a result
// relation's indexes see a row; a direct insert opens a result relation per push, so hopper.jobs'
// seven predicates were planned again for every job: 12% of the direct insert. The prepared
// predicates are kept per index in a memory context of their own and dropped, at the next insert,
// after any relcache invalidation of the table or of one of its indexes (CREATE or DROP INDEX,
// REINDEX, ANALYZE, ...).
#pragma once

extern "C" {
#include "postgres.h"
#include "nodes/execnodes.h"
}

namespace hopper::index_predicates {

// Gives every partial index of `rri` (opened with ExecOpenIndices) its prepared predicate, so that
// ExecInsertIndexTuples does not prepare it again. Plain C: call it under pg_guard.
void prepare(ResultRelInfo* rri);

}  // namespace hopper::index_predicates
