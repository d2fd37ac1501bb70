// How often the worker heartbeats a job, which must not depend on the worker's clock agreeing with
// the server's: the server's times are read as they come, with this machine's clock set elsewhere.
#include <cstdint>
#include <optional>

#include <gtest/gtest.h>

#include "heartbeat.hpp"

using namespace std::chrono_literals;

namespace hopper {
namespace {

// A job as a pull returns it from a server whose clock is `skew` ahead of this machine's, with a
// lease of `lease` from the claim.
Job pulled(Duration skew, Duration lease) {
    Job job;
    job.lease_until = Clock::now() + skew + lease;
    job.lease_left = lease;
    return job;
}

// In microseconds, which a failure prints readably.
int64_t interval_us(const Job& job, std::optional<Duration> lease) {
    return internal::heartbeat_interval(job, lease).count();
}

// A clock 40 s behind gave a 10 s lease its first heartbeat after 17 s (every lease ran out, the
// job ran again and again); one ahead, a heartbeat every 100 ms.
TEST(HeartbeatInterval, DoesNotDependOnTheWorkersClock) {
    for (Duration skew :
         {Duration(-1h), Duration(-40s), Duration(0s), Duration(40s), Duration(1h)}) {
        SCOPED_TRACE(testing::Message() << "server clock ahead by " << skew.count() << " us");
        EXPECT_EQ(interval_us(pulled(skew, 10s), std::nullopt), 3333333);
        // A lease of the worker's own is used as it is.
        EXPECT_EQ(interval_us(pulled(skew, 30s), Duration(30s)), 10000000);
    }
}

TEST(HeartbeatInterval, StaysWithinItsBounds) {
    EXPECT_EQ(interval_us(pulled(0s, 0s), std::nullopt), 100000);
    EXPECT_EQ(interval_us(pulled(0s, -5s), std::nullopt), 100000)
        << "a lease already run out as it arrived";
    EXPECT_EQ(interval_us(pulled(0s, 24h), std::nullopt), 600000000);
}

int64_t extension_us(const Job& job, std::optional<Duration> lease) {
    return internal::heartbeat_extension(job, lease).count();
}

// Each heartbeat extends the lease by the length its interval is a third of: the lease the job was
// pulled with, not the queue's of the moment, which may have been shortened since.
TEST(HeartbeatInterval, AHeartbeatExtendsByTheLeaseItIsAThirdOf) {
    for (Duration skew : {Duration(-40s), Duration(0s), Duration(40s)}) {
        SCOPED_TRACE(testing::Message() << "server clock ahead by " << skew.count() << " us");
        EXPECT_EQ(extension_us(pulled(skew, 9s), std::nullopt), 9000000);
        EXPECT_EQ(extension_us(pulled(skew, 30s), Duration(30s)), 30000000);
    }
    EXPECT_EQ(extension_us(pulled(0s, 2h), std::nullopt), 7200000000)
        << "a long lease is kept whole, though its heartbeats come every 10 minutes";
    // Never shorter than three of the shortest intervals.
    EXPECT_EQ(extension_us(pulled(0s, 0s), std::nullopt), 300000);
    EXPECT_EQ(extension_us(pulled(0s, -5s), std::nullopt), 300000);
}

}  // namespace
}  // namespace hopper
