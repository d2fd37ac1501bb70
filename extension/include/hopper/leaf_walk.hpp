// The first candidates of a claim that resumes at the queue's hint, read from one leaf page of
// jobs_pull_idx without an index scan.
//
// PostgreSQL 15's B-tree scan reads the whole rest of the leaf page it lands on before it returns
// the first entry: every entry past the start is checked against every scan key (the queue's
// text, the row comparison with the hint, run_at <= the claim's time), each key after the text
// column found by walking the tuple. A claim of one job therefore checked about half a page, some
// ninety entries, for the one it took: 16% of the backend in a one-at-a-time drain. This descends
// the same way the scan does, stops at the first few entries it can use, and leaves anything it
// cannot finish to the scan.
//
// Plain C over PostgreSQL's API: call it under pg_guard, with no C++ object that has a destructor
// alive in between.
#pragma once

#include "hopper/claim_hint.hpp"

extern "C" {
#include "postgres.h"
#include "access/skey.h"
#include "storage/itemptr.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"
}

namespace hopper::leaf_walk {

// Whether `idx` (checked by the caller to be a valid B-tree on (queue text, priority smallint,
// run_at timestamptz, id bigint)) can be walked: every column in ascending order and a queue
// collation for which equal means byte-equal.
bool usable(Relation idx);

struct Walk {
    int found;             // heap TIDs put in the caller's array, in index order
    bool exhausted;        // nothing lies past what was read: no scan is needed after them
    claim_hint::Key next;  // where a scan picks up if more jobs are needed (>=)
};

// Up to `max` heap TIDs of entries at or after (queue, start) that belong to `queue`, have run_at
// <= `at` and are not marked dead, from the leaf page that holds that position. The entries are
// copied while the page is share-locked; the lock and the pin are let go before it returns, as
// the scan itself does under an MVCC snapshot.
Walk candidates(Relation idx, Datum queue, const claim_hint::Key& start, TimestampTz at,
                Snapshot snap, ItemPointerData* tids, int max);

// The scan's keys, for a scan of the queue's jobs in pull order that starts where a walk stopped
// (or at the queue's first entry, without `start`): queue = $1, [(priority, run_at, id) >=
// start,] run_at <= at, the claim statements' index conditions in index column order, each with
// the index column's collation. `row` holds the row comparison's members and must outlive the
// scan. Returns the number of keys put in `keys` (at most 3).
int scan_keys(Relation idx, Datum queue, const claim_hint::Key* start, TimestampTz at,
              ScanKeyData* keys, ScanKeyData* row);

}  // namespace hopper::leaf_walk
