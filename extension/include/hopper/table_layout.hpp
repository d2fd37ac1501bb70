// What the direct paths look up about hopper's tables by name, remembered per backend: the
// tables' OIDs, the attribute numbers of the columns they use, and how hopper.job_history's columns
// map onto hopper.jobs'. Looking them up compared column names with strcmp, or made six syscache
// lookups, on every call: 2.5% of a CPU-bound one-at-a-time drain.
//
// An entry is forgotten when a relcache invalidation of one of its relations, or of all of them,
// reaches the backend (ALTER TABLE, DROP, ANALYZE, an index created or dropped, ...), and every
// entry when a schema is renamed or dropped; a value worked out while one arrived is not kept.
// The OIDs found by name are then as fresh as the syscache lookups they replace.
//
// Plain C over PostgreSQL's API: call under pg_guard.
#pragma once

extern "C" {
#include "postgres.h"
#include "catalog/pg_attribute.h"
#include "utils/relcache.h"
}

namespace hopper::table_layout {

constexpr int kMaxValues = 32;
constexpr int kMaxRelations = 10;

// The values remembered under `key` (an address of the caller's) for relation `relid`: false if
// none, or not `n` of them.
bool recall(const void* key, Oid relid, int* values, int n);

// What remember() needs: take it before working the values out.
uint64 generation();

// Forgets every entry, as an invalidation of all relations would.
void forget();

// Remembers `n` values (at most kMaxValues) under `key` for rels[0], forgotten when any of `rels`
// changes; unless an invalidation arrived since generation() returned `since`.
void remember(const void* key, const Oid* rels, int nrels, const int* values, int n, uint64 since);

// Whether `att` is a live column of type `type` (any type if InvalidOid: an enum's, whose labels
// the caller checks) with no type modifier. The direct paths read and write a column's values as
// datums of the type the install script gave it: a value of another type, or one its typmod would
// have cut or refused (varchar(10), timestamptz(0)), is for the SQL statements, which cast or
// refuse it.
bool typed(Form_pg_attribute att, Oid type);

// The attribute numbers of `names` in `rel` into `out` (0 for a name it has no live column of, or
// whose column is not typed() as `types` says), remembered under the address of `names`: pass
// static arrays. False if any is 0.
bool attnums(Relation rel, const char* const* names, const Oid* types, int n, int* out);

}  // namespace hopper::table_layout
