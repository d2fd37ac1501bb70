// Claim-only transactions commit without waiting for their WAL flush.
//
// A claim need not be durable on its own: if the server crashes before the claim reaches disk,
// the job is simply available again after recovery, exactly as if the worker had died holding it
// (at-least-once either way), and every later write about the job (heartbeat, complete, fail)
// commits durably and so flushes the claim with it. What must survive is the fencing token: a
// token handed out before a crash must never be handed out again, so before such a commit the
// WAL that advanced hopper.lease_token_seq past it is flushed (once per 32 tokens).
//
// Only a transaction whose every write came from queue_pull qualifies: a transaction that wrote
// anything else (a push, a completion, the caller's own rows) before or after its pulls commits
// as synchronous_commit says. hopper.async_claims = off turns it off.
#pragma once

namespace hopper::claim_commit {

// Around the claim statements of one queue_pull call.
void before_claim();
void after_claim();
// A write inside a claim that is no claim: a job it buried (its last attempt's lease had run
// out), whose history row and hopper:done notice must not be undone by a crash after the commit.
// The transaction then commits as synchronous_commit says.
void not_only_claims();

}  // namespace hopper::claim_commit
