// The outcome of a failed attempt (include/hopper/failed_attempt.hpp).
#include "hopper/failed_attempt.hpp"

#include "hopper/claim_hint.hpp"
#include "hopper/jobs.hpp"
#include "hopper/notify.hpp"
#include "hopper/reaper.hpp"

namespace hopper::failed_attempt {

const char* settle(spi::Connection& conn, int64_t id, const std::function<spi::Result()>& retry,
                   const std::function<spi::Result()>& bury) {
    spi::Result r = retry();
    if (!r.empty()) {
        bool delayed = r.get_bool(0, 1);
        claim_hint::made_available(r.get_text(0, 2),
                                   {r.get_int16(0, 3), r.get_timestamptz(0, 4), id}, delayed);
        if (r.get_bool(0, 5)) notify::slot_freed(r.get_text(0, 2));
        // Back at once (retry_in 0): wake its workers at commit, as a release does. A delayed
        // one is announced by the reaper when it falls due after the commit; one that falls due
        // before (a transaction that outlasts the backoff) is announced at commit, as a push
        // whose run_at has come by then: the reaper looks only at times since its last pass.
        // One that falls due while the commit is under way is announced at commit through the
        // reaper (push_wakeup.cpp), which this session must know of, as a pushing one does.
        if (!delayed) {
            notify::queue_ready(r.get_text(0, 2));
        } else {
            reaper::ensure_running(conn);
            notify::queue_pushed(r.get_text(0, 2), r.get_timestamptz(0, 4), 1);
        }
        return delayed ? "scheduled" : "available";
    }
    spi::Result d = bury();
    if (!d.empty()) {
        notify::job_done(id, d.get_text(0, 1), "dead", d.get_bool(0, 2));
        if (d.get_bool(0, 3)) notify::slot_freed(d.get_text(0, 1));
        return "dead";
    }
    jobs::require_known(conn, id);  // P0002 for an unknown id; otherwise not the caller's job
    return nullptr;
}

}  // namespace hopper::failed_attempt
