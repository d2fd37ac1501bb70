// What the code that reads and writes hopper's tables straight through the access methods
// (direct_claim.cpp, direct_complete.cpp) shares: lookups, the queue's settings, and the writer of
// history rows.
//
// Plain C over PostgreSQL's API: call these under pg_guard, with no C++ object that has a
// destructor alive in between.
#pragma once

extern "C" {
#include "postgres.h"
#include "datatype/timestamp.h"
#include "executor/execPartition.h"
#include "nodes/execnodes.h"
#include "storage/lockdefs.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"
}

#include "hopper/direct_insert.hpp"

namespace hopper::direct_access {

// The relations the direct paths work on, found by name once per backend (table_layout's memory,
// forgotten when any of them changes). False: hopper is not installed as expected.
struct Tables {
    Oid jobs;
    Oid queues;
    Oid history;
    Oid pull_index;          // jobs_pull_idx
    Oid lease_token;         // lease_token_seq
    Oid job_id;              // job_id_seq
    Oid batches;             // job_batches (packed rows)
    Oid batches_pull_index;  // job_batches_pull_idx
};
bool tables(Tables* t);
// tables(), for a claim or a completion. Also false (call the statement) when the transaction is
// read-only (the statements raise 25006) or uses one snapshot throughout (REPEATABLE READ,
// SERIALIZABLE: a row changed since it is a serialization failure, not one to follow).
bool find_tables(Tables* t);
// One of the tables tables() handed out, opened with `mode`; nullptr if it is gone. DROP
// EXTENSION may commit while the caller waits for the lock: the OID then names no table, and the
// caller calls its SQL statement instead, whose plan is made anew (on the tables made again, or
// failing as a statement on a dropped table does, 42P01). Checked only when an invalidation has
// come in since tables() answered: a drop sends one, and otherwise the OIDs are as fresh as its
// lookups, so the paths pay a comparison for it.
Relation open_table(Oid relid, LOCKMODE mode);

// The attribute number of column `name`, 0 if there is none.
int attnum_of(TupleDesc desc, const char* name);
// The OID of enum `type`'s label, InvalidOid if it has none.
Oid enum_label(Oid type, const char* label);
// Whether the current user holds every privilege of `mode` on the whole table.
bool may(Oid relid, AclMode mode);
// Whether `index` is still one of the (locked) table's indexes. The OIDs find_tables() remembers
// are read before the call locks anything: REINDEX CONCURRENTLY may have swapped the index since,
// and dropped the old one. Once the table is locked, its index list is current, and an index on it
// cannot be dropped until the lock goes.
bool lists_index(Relation table, Oid index);
// A copy of a column's value in the current memory context, detoasted: its row may be deleted.
Datum copy_value(Form_pg_attribute att, Datum value);

// What the claim statements read of a queue in hopper.queues.
struct QueueRow {
    bool found;
    bool paused;
    bool limited;
    bool packed;
    bool notify_done;
    bool keeps;             // retention > 0: finished jobs go to history
    int64_t lease_us;       // the queue's lease
    int32 max_running;      // the queue's cap on running jobs, -1 if none
    int32 key_max_running;  // its default per concurrency key, -1 if none
    bool rated;             // it has rate limits
};
// hopper.queues, open (AccessShareLock) with its primary key, and where the columns read are.
struct QueueTable {
    Relation rel;
    Relation pkey;
    int name, paused, limited, packed, notify_done, retention, lease, max_running, key_max_running,
        rated;
};
// False (and nothing left open): the table is not as the extension made it, or has row level
// security.
bool open_queues(Oid relid, QueueTable* t);
// Reads the queue's row through the primary key.
void read_queue(const QueueTable& t, Datum name, Snapshot snap, QueueRow* q);
void close_queues(QueueTable* t);

// The values of a history row that are not copied from the job's row of hopper.jobs.
enum HistoryExtra {
    kExtraAttempt,
    kExtraStartedAt,
    kExtraWorker,
    kExtraProgress,
    kExtraState,
    kExtraFinishedAt,
    kExtraResult,
    kHistoryExtras
};

constexpr int kMaxHistoryColumns = 32;
// Most history rows a writer holds back for one heap_multi_insert.
constexpr int kHistoryBatch = 64;

// Writes rows into hopper.job_history, routed to the partition of their finished_at as the SQL
// INSERT would be. A table partitioned by range on one column has each row's partition found
// from its bounds, and a partition with the table's own columns and nothing that only the
// statements honour (see direct_insert::defers_to_sql) gets the row straight, as a direct insert
// does. Any other partition, or table, gets it through the executor's routing, as logical
// replication routes rows.
struct HistoryWriter {
    Relation rel;
    // Per history column: the hopper.jobs attribute it copies, or -1 - HistoryExtra.
    int source[kMaxHistoryColumns];
    // The partition key's column in rel (range partitions on one column), else 0.
    int range_key;
    // The columns finished_at, created_at and started_at in rel (-1: none), and the clock read
    // the first time a row's start lies after its finish (0 until then): history_insert keeps
    // finished_at from falling before either, as HOPPER_FINISHED_AT does.
    int finished_col;
    int created_col;
    int started_col;
    TimestampTz clock;
    // The partition written straight: open in `direct`, InvalidOid if none; and one found unfit.
    Oid direct_oid;
    Oid unfit_oid;
    Relation direct_rel;
    direct_insert::Inserter direct;
    // Rows for the straight partition, written with one heap_multi_insert when the partition
    // changes, the buffer fills or the writer closes: a batch's history rows share their pages'
    // locks and WAL records. Slots made in direct's executor state, n_made of them so far.
    TupleTableSlot* pending[kHistoryBatch];
    int n_pending;
    int n_made;
    // The executor's routing, set up when a row first needs it.
    bool started;
    EState* estate;
    ResultRelInfo* root;
    ModifyTableState* mtstate;
    PartitionTupleRouting* proute;  // nullptr: history is a plain table
    TupleTableSlot* slot;
};

// Opens hopper.job_history (RowExclusiveLock) and maps its columns onto the job's and the extras.
// False (and nothing open): a column it does not know, a type that differs from the job's, row
// level security or triggers on the table itself.
bool history_open(Oid relid, Relation jobs, HistoryWriter* w);
// Inserts the history row of a job whose row of hopper.jobs holds job_values (all its columns).
void history_insert(HistoryWriter* w, CommandId cid, const Datum* job_values, const bool* job_nulls,
                    const Datum* extras, const bool* extra_nulls);
// Fires the AFTER triggers of partitions, if any, and closes.
void history_close(HistoryWriter* w);

}  // namespace hopper::direct_access
