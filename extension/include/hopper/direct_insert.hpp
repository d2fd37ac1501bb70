// What the direct inserts (include/hopper/push_insert.hpp, batch_insert.hpp) share: the checks that
// decide whether a table may be written without the SQL INSERT, and a result relation of their own
// to insert rows through, as COPY and logical replication do.
//
// Plain C over PostgreSQL's API: call these under pg_guard, with no C++ object that has a
// destructor alive in between.
#pragma once

extern "C" {
#include "postgres.h"
#include "nodes/execnodes.h"
#include "utils/relcache.h"
}

namespace hopper::direct_insert {

// Whether something about `rel` only the SQL statements honour: row level security, triggers,
// rules, stored generated columns. Every direct path (inserts, claims, completions, history rows)
// sends such a table back to SQL.
bool defers_to_sql(Relation rel);

// Opens `relid` (RowExclusiveLock) if the caller may INSERT into it and SELECT from it (what the
// INSERT ... RETURNING it stands for needs) and nothing about it asks for the SQL INSERT: row level
// security, triggers, rules, stored generated columns, or not being a plain table. Privileges
// granted per column only also send the caller to SQL, which sorts them out. nullptr otherwise,
// and if the table is gone (direct_access::open_table: `relid` is one tables() handed out).
Relation open_plain(Oid relid);

// A result relation for `rel` in `estate`, of its own, as COPY and logical replication make one;
// allocated in the current memory context (the executor state's).
ResultRelInfo* result_relation(EState* estate, Relation rel);

struct Inserter {
    EState* estate;
    ResultRelInfo* rri;
    TupleTableSlot* slot;  // virtual, of the table's row type: fill tts_values and tts_isnull
    MemoryContext caller;
    // The table's indexes not opened yet, with their kept descriptions (include/hopper/
    // index_infos.hpp): InvalidOid once opened.
    int n_waiting;
    Oid* waiting;
    IndexInfo** waiting_info;
    bool apart;  // begun with begin_apart()
};

// Sets up the result relation; the current memory context is the executor's until end(). Indexes
// whose description is kept are opened when a row first goes into them, the others at once.
void begin(Relation rel, Inserter* in);
// As begin(), for a writer that inserts now and then among other work (the history writer of
// direct_access.hpp): the caller's memory context stays current.
void begin_apart(Relation rel, Inserter* in);
// Opens the indexes that `row`, a version about to be written through in->rri, goes into and that
// are not open yet. insert() calls it; an update calls it with the new version.
void open_indexes_for(Inserter* in, TupleTableSlot* row);
// Inserts the row in in->slot (constraints, heap, every index entry), then clears the slot.
void insert(Inserter* in);
// Writes `n` rows held in `slots` (checked, their indexes opened) as COPY writes them: their heap
// rows with one heap_multi_insert, then each row's index entries; clears the slots.
void write_held(Inserter* in, TupleTableSlot** slots, int n);
// Tears down, closes `rel`, and makes the rows inserted, if any, visible to what follows in the
// transaction, as an SPI statement would.
void end(Relation rel, Inserter* in, bool inserted);

}  // namespace hopper::direct_insert
