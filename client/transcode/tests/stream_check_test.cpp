#include <fstream>

#include <unistd.h>

#include <gtest/gtest.h>

#include "stream_check.hpp"

namespace fs = std::filesystem;
using transcode::check_stream;
using transcode::EncodePlan;
using transcode::IncompleteOutput;
using transcode::Rendition;

namespace {

constexpr const char* kTwoSegments =
    "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-TARGETDURATION:10\n#EXT-X-PLAYLIST-TYPE:VOD\n"
    "#EXTINF:10.000000,\nseg_00000.ts\n#EXTINF:4.500000,\nseg_00001.ts\n#EXT-X-ENDLIST\n";

class StreamCheck : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = fs::temp_directory_path() /
               ("hopper-stream-check-test-" + std::to_string(::getpid()) + "-" +
                ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(dir_);
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    void write(const std::string& name, const std::string& text) {
        fs::create_directories((dir_ / name).parent_path());
        std::ofstream(dir_ / name, std::ios::binary) << text;
    }
    // What ffmpeg writes for one rendition, under `sub` ("" or "720p/").
    void media(const std::string& sub) {
        write(sub + "index.m3u8", kTwoSegments);
        write(sub + "seg_00000.ts", std::string(188, 'G'));
        write(sub + "seg_00001.ts", std::string(188, 'G'));
    }
    static EncodePlan single() {
        EncodePlan p;
        Rendition r;
        r.name = "source";
        r.playlist = "index.m3u8";
        p.renditions.push_back(r);
        p.playlist = r.playlist;
        return p;
    }
    static EncodePlan ladder() {
        EncodePlan p;
        for (const char* n : {"720p", "480p"}) {
            Rendition r;
            r.name = n;
            r.playlist = std::string(n) + "/index.m3u8";
            p.renditions.push_back(r);
        }
        p.playlist = "master.m3u8";
        return p;
    }
    void master() {
        write("master.m3u8",
              "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-STREAM-INF:BANDWIDTH=2500000,RESOLUTION=1280x720\n"
              "720p/index.m3u8\n\n#EXT-X-STREAM-INF:BANDWIDTH=1100000,RESOLUTION=854x480\n"
              "480p/index.m3u8\n");
    }
    // The message of the IncompleteOutput that check_stream throws, or "" when it passes.
    std::string fault(const EncodePlan& plan) {
        try {
            check_stream(dir_, plan);
        } catch (const IncompleteOutput& e) {
            return e.what();
        }
        return "";
    }
    fs::path dir_;
};

}  // namespace

TEST_F(StreamCheck, WholeStreamPassesWithItsDuration) {
    media("");
    auto d = check_stream(dir_, single());
    ASSERT_EQ(d.size(), 1u);
    EXPECT_EQ(d[0].playlist, "index.m3u8");
    EXPECT_DOUBLE_EQ(d[0].seconds, 14.5);
}

// What ffmpeg leaves on a full disk and still exits 0 for.
TEST_F(StreamCheck, EmptyPlaylistFails) {
    media("");
    write("index.m3u8", "");
    EXPECT_EQ(fault(single()), "index.m3u8 is empty");
}

TEST_F(StreamCheck, MissingPlaylistFails) {
    EXPECT_EQ(fault(single()), "index.m3u8 was not written");
}

TEST_F(StreamCheck, PlaylistWithoutEndFails) {
    media("");
    std::string cut = kTwoSegments;
    write("index.m3u8", cut.substr(0, cut.find("#EXT-X-ENDLIST")));
    EXPECT_EQ(fault(single()), "index.m3u8 is cut short (no #EXT-X-ENDLIST)");
}

TEST_F(StreamCheck, EmptyOrMissingSegmentFails) {
    media("");
    write("seg_00001.ts", "");
    EXPECT_EQ(fault(single()), "seg_00001.ts is empty");
    fs::remove(dir_ / "seg_00001.ts");
    EXPECT_EQ(fault(single()), "seg_00001.ts is missing");
}

TEST_F(StreamCheck, LadderChecksMasterAndEveryRendition) {
    master();
    media("720p/");
    media("480p/");
    auto d = check_stream(dir_, ladder());
    ASSERT_EQ(d.size(), 2u);
    EXPECT_EQ(d[1].playlist, "480p/index.m3u8");
    EXPECT_DOUBLE_EQ(d[1].seconds, 14.5);

    write("480p/seg_00000.ts", "");
    EXPECT_EQ(fault(ladder()), "480p/seg_00000.ts is empty");
    media("480p/");
    write("master.m3u8", "");
    EXPECT_EQ(fault(ladder()), "master.m3u8 is empty");
    write("master.m3u8", "#EXTM3U\n#EXT-X-STREAM-INF:BANDWIDTH=2500000\n720p/index.m3u8\n");
    EXPECT_EQ(fault(ladder()), "master.m3u8 does not name the 480p rendition");
}

TEST(StreamDuration, ShortOnlyBeyondTheTolerance) {
    using transcode::PlaylistDuration;
    using transcode::short_playlist;
    // A 20 s upload cut in half: the stream lasts 10 s.
    std::vector<PlaylistDuration> halved = {{"index.m3u8", 10.0}};
    ASSERT_NE(short_playlist(halved, 20.0), nullptr);
    EXPECT_EQ(short_playlist(halved, 20.0)->playlist, "index.m3u8");
    // Rounding of the last segment and a container a frame longer than its streams are fine.
    EXPECT_EQ(short_playlist({{"index.m3u8", 19.2}}, 20.0), nullptr);
    EXPECT_EQ(short_playlist({{"index.m3u8", 20.04}}, 20.0), nullptr);
    // Long inputs: 2% (a minute's loss in an hour is not rounding).
    EXPECT_EQ(short_playlist({{"index.m3u8", 3530.0}}, 3600.0), nullptr);
    EXPECT_NE(short_playlist({{"index.m3u8", 3500.0}}, 3600.0), nullptr);
    // A ladder: any rendition cut short counts.
    std::vector<PlaylistDuration> ladder = {{"720p/index.m3u8", 20.0}, {"480p/index.m3u8", 12.0}};
    ASSERT_NE(short_playlist(ladder, 20.0), nullptr);
    EXPECT_EQ(short_playlist(ladder, 20.0)->playlist, "480p/index.m3u8");
}

// An input of unknown length (a streamed recording) promised nothing, so nothing is short, and it
// lasts as long as its longest rendition.
TEST(StreamDuration, UnknownLengthIsFoundFromTheStream) {
    using transcode::PlaylistDuration;
    std::vector<PlaylistDuration> ladder = {{"720p/index.m3u8", 4.0}, {"480p/index.m3u8", 4.04}};
    EXPECT_EQ(transcode::short_playlist(ladder, 0), nullptr);
    EXPECT_DOUBLE_EQ(transcode::longest(ladder), 4.04);
    EXPECT_EQ(transcode::longest({}), 0);
}
