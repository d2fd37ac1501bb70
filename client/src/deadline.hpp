// Deadlines from a Duration the caller chose: Duration::max() (or any span past the steady
// clock's range) means "never", where plain now() + d would overflow and land in the past.
#pragma once

#include <chrono>

#include "hopper/types.hpp"

namespace hopper::internal {

using Steady = std::chrono::steady_clock;

// now + d, saturating at the clock's end; a negative d is now.
inline Steady::time_point deadline_after(Duration d) {
    const Steady::time_point now = Steady::now();
    if (d <= Duration::zero()) return now;
    // Compared in the clock's own unit, which a large Duration would overflow when converted.
    const auto room = Steady::time_point::max() - now;
    if (d >= std::chrono::duration_cast<Duration>(room)) return Steady::time_point::max();
    return now + std::chrono::duration_cast<Steady::duration>(d);
}

}  // namespace hopper::internal
