// Settings (GUCs) of the hopper extension; defined in src/module.cpp.
#pragma once

namespace hopper::guc {
extern bool auto_create_queues;  // hopper.auto_create_queues
extern int max_pull;             // hopper.max_pull
extern int max_payload_bytes;    // hopper.max_payload_bytes
extern bool notify;              // hopper.notify
extern bool notify_relay;        // hopper.notify_relay
extern bool async_claims;        // hopper.async_claims
extern bool claim_resume;        // hopper.claim_resume
extern bool pack_batches;        // hopper.pack_batches
}  // namespace hopper::guc
