// hopper.claim_positions(): where this database's claims start, one row per queue that holds a
// slot for it (see include/hopper/claim_hint.hpp). For operators who want to see why a claim
// under a long-held snapshot is fast or slow, and for the tests of slot lending.
#include "hopper/claim_hint.hpp"
#include "hopper/result.hpp"

extern "C" {
#include "utils/timestamp.h"
}

using namespace hopper;

HOPPER_FUNCTION(hopper_claim_positions) {
    result::SetResult out(fcinfo);
    for (const claim_hint::Position& p : claim_hint::positions()) {
        Datum values[6];
        // Without a hint, claims start at the front: no position to show.
        bool nulls[6] = {false, false, !p.valid, !p.valid, !p.valid, p.last_used == 0};
        values[0] = spi::arg_text(p.queue).value;
        values[1] = BoolGetDatum(p.valid);
        values[2] = Int16GetDatum(p.key.priority);
        values[3] = TimestampTzGetDatum(p.key.run_at);
        values[4] = Int64GetDatum(p.key.id);
        values[5] = TimestampTzGetDatum(p.last_used);
        out.add_values(values, nulls);
    }
    return (Datum)0;
}
