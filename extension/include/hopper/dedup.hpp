// Dedup windows: a push with a dedup key and a window returns the first job of its queue with that
// key that is unfinished or that finished after being created within the window.
//
// The unique index on hopper.jobs (queue, dedup_key) only knows unfinished jobs, and a job can move
// to history while a push runs: its INSERT then succeeds once the mover commits. So the push first
// inserts and afterwards, in a later statement (a fresh snapshot under READ COMMITTED, where the
// move is visible), looks for the original; when there is one it deletes its own row again.
//
// A transaction that keeps one snapshot (REPEATABLE READ, SERIALIZABLE) sees an original that was
// pushed before its snapshot and finished since as still unfinished, and answers with it. One
// pushed after the snapshot it cannot see at all: while unfinished, the INSERT's ON CONFLICT
// refuses with serialization_failure; once finished, refuse_unseen does the same.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hopper/spi.hpp"

namespace hopper::dedup {

constexpr int64_t kMaxWindowUs = int64_t(3660) * 86400 * 1000000;  // ~10 years

// Of the jobs just inserted into `queue` (ids), those that duplicate an earlier job with the same
// key (finished and created within window_us, or, under a snapshot older than the statement, still
// seen unfinished) are deleted. Returns (deleted id, original id) pairs.
std::vector<std::pair<int64_t, int64_t>> undo_duplicates(spi::Connection& conn,
                                                         const std::string& queue,
                                                         const std::vector<int64_t>& ids,
                                                         int64_t window_us);

// The first job of `queue` with `key` that finished and was created within window_us of now.
std::optional<int64_t> finished_within(spi::Connection& conn, const std::string& queue,
                                       const std::string& key, int64_t window_us);

// Only when IsolationUsesXactSnapshot(), for keys just inserted into `queue` whose rows
// undo_duplicates kept (the transaction's snapshot sees no original for them): raises
// serialization_failure if, in a snapshot taken now, a job of `queue` with one of the keys
// finished within window_us. The transaction's snapshot sees neither that job nor its finish, so
// the push could only make a second job; the error rolls the statement's rows back.
void refuse_unseen(spi::Connection& conn, const std::string& queue,
                   const std::vector<std::optional<std::string>>& keys, int64_t window_us);

}  // namespace hopper::dedup
