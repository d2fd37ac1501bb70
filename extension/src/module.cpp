// Module entry: the magic block and the extension's settings.
#include "hopper/boundary.hpp"
#include "hopper/guc.hpp"
#include "hopper/reaper.hpp"

extern "C" {
#include "miscadmin.h"
#include "utils/guc.h"
}

namespace hopper::guc {
bool auto_create_queues = true;
int max_pull = 1000;
int max_payload_bytes = 1024 * 1024;
bool notify = true;
bool notify_relay = true;
bool async_claims = true;
bool claim_resume = true;
bool pack_batches = false;
}  // namespace hopper::guc

extern "C" {
PG_MODULE_MAGIC;

void _PG_init(void);

void _PG_init(void) {
    using namespace hopper::guc;
    DefineCustomBoolVariable("hopper.auto_create_queues",
                             "Pushing to an unknown queue creates it with default settings.",
                             nullptr, &auto_create_queues, true, PGC_USERSET, 0, nullptr, nullptr,
                             nullptr);
    DefineCustomIntVariable("hopper.max_pull", "Most jobs one queue_pull call may claim.", nullptr,
                            &max_pull, 1000, 1, 100000, PGC_SUSET, 0, nullptr, nullptr, nullptr);
    DefineCustomIntVariable("hopper.max_payload_bytes", "Largest job payload accepted, in bytes.",
                            nullptr, &max_payload_bytes, 1024 * 1024, 64, 256 * 1024 * 1024,
                            PGC_SUSET, GUC_UNIT_BYTE, nullptr, nullptr, nullptr);
    DefineCustomBoolVariable(
        "hopper.notify",
        "Send NOTIFY on push (channel hopper:<queue>) and when a job of a queue "
        "with notify_done finishes (channel hopper:done).",
        nullptr, &notify, true, PGC_USERSET, 0, nullptr, nullptr, nullptr);
    DefineCustomBoolVariable("hopper.notify_relay",
                             "Let this database's reaper send the NOTIFY of a push after it "
                             "commits.",
                             "A NOTIFY serializes its transaction's commit with every other "
                             "notifying commit of the database; a relayed push commits without "
                             "it. Off: pushes send their NOTIFY themselves.",
                             &notify_relay, true, PGC_USERSET, 0, nullptr, nullptr, nullptr);
    DefineCustomBoolVariable("hopper.async_claims",
                             "Let a transaction that only claims jobs commit without waiting "
                             "for its WAL flush.",
                             "A claim lost in a crash leaves its job available again, as a "
                             "worker's death would; the job's next write flushes it. Fencing "
                             "tokens are flushed first, so none is ever handed out twice.",
                             &async_claims, true, PGC_USERSET, 0, nullptr, nullptr, nullptr);
    DefineCustomBoolVariable("hopper.claim_resume",
                             "Let a claim start where the queue's last claims ended instead of at "
                             "the front of the queue's index.",
                             "Under a long-held snapshot the front of the index fills with dead "
                             "entries that nothing can remove; starting past them keeps the "
                             "claim's cost flat. Off: every claim starts at the front.",
                             &claim_resume, true, PGC_USERSET, 0, nullptr, nullptr, nullptr);
    DefineCustomBoolVariable("hopper.pack_batches",
                             "Store the jobs of a queue_push_batch in packed rows of up to 100 "
                             "instead of a row each.",
                             "Only for batches of due jobs without dedup or concurrency keys, "
                             "pushed to a queue without limits. Off: a row per job, as a single "
                             "push writes.",
                             &pack_batches, false, PGC_USERSET, 0, nullptr, nullptr, nullptr);
    // Reaper: settings, and in a preloaded server the launcher that starts one per database.
    hopper::reaper::define_gucs();
    if (process_shared_preload_libraries_in_progress) {
        hopper::reaper::preloaded = true;
        hopper::reaper::register_launcher();
    }
    MarkGUCPrefixReserved("hopper");
}
}
