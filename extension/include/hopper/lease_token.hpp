// Fencing tokens stay unique across a failover.
//
// Tokens come from hopper.lease_token_seq (pull.cpp's and limited_claim_sql.cpp's claim
// statements, direct_claim.cpp). A standby promoted after an asynchronous failover continues the
// sequence from the last WAL it replayed, so the tokens the old primary handed out in WAL that
// never reached the standby would come round again: a worker that claimed a job there and
// reconnects to the new primary would hold the token of the job's next claim, and could heartbeat
// and complete it. Crash recovery (one timeline) is claim_commit.hpp's business.
//
// So each timeline hands out tokens above a floor of its own, (timeline - 1) * 2^48: before its
// first claim on a timeline past the first, a backend moves the sequence up to that floor if it is
// still below it. Tokens stay plain sequence values and only grow; a first timeline (a server never
// promoted) leaves the sequence as it is. Holds while a timeline hands out fewer than 2^48 tokens
// (89 years at 100,000 claims a second), up to timeline 32768.
#pragma once

extern "C" {
#include "postgres.h"
}

namespace hopper::lease_token {

// hopper.lease_token_seq's OID; 42704 when it is gone (a DROP EXTENSION committed meanwhile).
// PostgreSQL errors: call it under pg_guard.
Oid sequence();

// Before any claim of a queue_pull hands out a token. After the backend's first claim outside
// recovery it costs the test of one flag: a server's timeline changes only when it leaves
// recovery, and a backend that saw it out of recovery lives on that timeline to the end (a session
// connected to a standby before its promotion checks at its first claim after it).
void before_claims();

}  // namespace hopper::lease_token
