#include <gtest/gtest.h>

#include "progress.hpp"

using transcode::progress_fraction;
using transcode::ProgressParser;

TEST(Progress, ParsesBlocksAcrossArbitraryChunks) {
    const std::string text =
        "frame=25\nfps=0.00\nout_time_us=1000000\nout_time_ms=1000000\nspeed=2.5x\n"
        "progress=continue\nframe=50\nout_time_us=N/A\nspeed=N/A\nprogress=continue\n"
        "out_time_us=4000000\nprogress=end\n";
    for (size_t chunk : {1u, 3u, 7u, 1000u}) {
        ProgressParser p;
        std::vector<transcode::ProgressUpdate> all;
        for (size_t i = 0; i < text.size(); i += chunk) {
            auto got = p.feed(text.substr(i, chunk));
            all.insert(all.end(), got.begin(), got.end());
        }
        ASSERT_EQ(all.size(), 3u) << "chunk " << chunk;
        EXPECT_EQ(all[0].out_time_us, 1000000);
        ASSERT_TRUE(all[0].speed.has_value());
        EXPECT_DOUBLE_EQ(*all[0].speed, 2.5);
        EXPECT_FALSE(all[0].end);
        EXPECT_FALSE(all[1].out_time_us.has_value());
        EXPECT_FALSE(all[1].speed.has_value());
        EXPECT_EQ(all[2].out_time_us, 4000000);
        EXPECT_TRUE(all[2].end);
    }
}

TEST(Progress, CarriageReturnsAndNoiseAreIgnored) {
    ProgressParser p;
    auto got = p.feed("garbage line\r\nout_time_us=500000\r\nprogress=continue\r\n");
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].out_time_us, 500000);
}

TEST(Progress, FractionOfDuration) {
    transcode::ProgressUpdate u;
    EXPECT_DOUBLE_EQ(progress_fraction(u, 4.0), 0.0);  // no position yet
    u.out_time_us = 1000000;
    EXPECT_DOUBLE_EQ(progress_fraction(u, 4.0), 0.25);
    EXPECT_DOUBLE_EQ(progress_fraction(u, 0.0), 0.0);  // unknown duration
    u.out_time_us = 9000000;
    EXPECT_DOUBLE_EQ(progress_fraction(u, 4.0), 1.0);  // clamped
}

// ffmpeg ends with progress=end whether it finished or failed: the last block tells where it got
// to, not that it is done.
TEST(Progress, TheLastBlockSaysWhereTheEncodeStopped) {
    ProgressParser p;
    auto got =
        p.feed("out_time_us=1500000\nprogress=continue\nout_time_us=1600000\nprogress=end\n");
    ASSERT_EQ(got.size(), 2u);
    EXPECT_TRUE(got[1].end);
    EXPECT_DOUBLE_EQ(progress_fraction(got[1], 4.0), 0.4);
    transcode::ProgressUpdate nothing_written;
    nothing_written.end = true;
    EXPECT_DOUBLE_EQ(progress_fraction(nothing_written, 4.0), 0.0);
}
