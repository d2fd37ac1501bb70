#include <algorithm>

#include <gtest/gtest.h>

#include "hls.hpp"

using transcode::build_encode;
using transcode::EncodeSettings;
using transcode::MediaInfo;
using transcode::plan_ladder;

namespace {

MediaInfo source(int w, int h, bool audio = true) {
    MediaInfo m;
    m.width = w;
    m.height = h;
    m.duration = 4;
    m.has_audio = audio;
    return m;
}

// The value following `flag` in argv, or "" if absent.
std::string after(const std::vector<std::string>& argv, const std::string& flag) {
    auto it = std::find(argv.begin(), argv.end(), flag);
    return it == argv.end() || it + 1 == argv.end() ? "" : *(it + 1);
}

}  // namespace

TEST(Ladder, NeverUpscales) {
    auto rungs = plan_ladder(source(1280, 720), {1080, 720, 480});
    ASSERT_EQ(rungs.size(), 2u);
    EXPECT_EQ(rungs[0].name, "720p");
    EXPECT_EQ(rungs[0].width, 1280);
    EXPECT_EQ(rungs[1].name, "480p");
    EXPECT_EQ(rungs[1].width, 854);  // 16:9 kept, even
    EXPECT_EQ(rungs[1].playlist, "480p/index.m3u8");
    EXPECT_GT(rungs[0].video_kbps, rungs[1].video_kbps);
}

TEST(Ladder, SmallSourceGetsOneRenditionAtItsOwnSize) {
    auto rungs = plan_ladder(source(320, 240), {1080, 720, 480});
    ASSERT_EQ(rungs.size(), 1u);
    EXPECT_EQ(rungs[0].height, 240);
    EXPECT_EQ(rungs[0].width, 320);
}

TEST(Ladder, AnOddHeightIsTheEvenRungBelowIt) {
    auto rungs = plan_ladder(source(1920, 1080), {241, 240, 481});
    ASSERT_EQ(rungs.size(), 2u) << "241 and 240 encode to the same 240 lines";
    EXPECT_EQ(rungs[0].name, "480p");
    EXPECT_EQ(rungs[0].height, 480);
    EXPECT_EQ(rungs[1].name, "240p");
    EXPECT_EQ(rungs[1].height, 240);
}

// Rungs have square pixels (setsar=1), so an anamorphic source's are sized from its width as
// shown: 720x480 at 32:27 is 16:9, and its 480p rung 854x480, not 720x480 squeezed to 3:2.
TEST(Ladder, AnamorphicSourceKeepsItsShownAspect) {
    MediaInfo dvd = source(720, 480);
    dvd.sample_aspect = 32.0 / 27.0;
    auto rungs = plan_ladder(dvd, {480, 240});
    ASSERT_EQ(rungs.size(), 2u);
    EXPECT_EQ(rungs[0].width, 854);
    EXPECT_EQ(rungs[0].height, 480);
    EXPECT_EQ(rungs[1].width, 426);
    EXPECT_EQ(rungs[1].height, 240);
    EncodeSettings ladder;
    ladder.ladder = true;
    ladder.ladder_heights = {480};
    EXPECT_NE(after(build_encode(ladder, dvd, "/in.mpg", "/out").argv, "-filter_complex")
                  .find("scale=854:480,setsar=1"),
              std::string::npos);
}

TEST(Ladder, HeightsAreSortedAndDeduplicated) {
    auto rungs = plan_ladder(source(1920, 1080), {480, 1080, 480});
    ASSERT_EQ(rungs.size(), 2u);
    EXPECT_EQ(rungs[0].height, 1080);
    EXPECT_EQ(rungs[1].height, 480);
}

TEST(Encode, SingleRenditionIsTheOriginalRecipe) {
    EncodeSettings s;
    auto plan = build_encode(s, source(640, 360), "/in/a.mp4", "/out/.a.partial-x");
    const auto& a = plan.argv;
    EXPECT_EQ(a[0], "ffmpeg");
    EXPECT_EQ(after(a, "-i"), "file:/in/a.mp4");
    EXPECT_EQ(after(a, "-c:v"), "libx264");
    EXPECT_EQ(after(a, "-c:a"), "aac");
    EXPECT_EQ(after(a, "-hls_time"), "10");
    EXPECT_EQ(after(a, "-hls_playlist_type"), "vod");
    EXPECT_EQ(after(a, "-progress"), "pipe:1");
    EXPECT_EQ(after(a, "-preset"), "veryfast");
    EXPECT_EQ(after(a, "-force_key_frames"), "expr:gte(t,n_forced*10)");
    EXPECT_EQ(after(a, "-hls_segment_filename"), "/out/.a.partial-x/seg_%05d.ts");
    EXPECT_EQ(a.back(), "/out/.a.partial-x/index.m3u8");
    EXPECT_EQ(plan.playlist, "index.m3u8");
    ASSERT_EQ(plan.renditions.size(), 1u);
}

// ffmpeg reads the input as a video container only, as the probe did: never as a playlist or list
// naming other files (the upload may have been replaced since it was probed).
TEST(Encode, TheInputIsReadAsAVideoContainerOnly) {
    for (bool ladder : {false, true}) {
        EncodeSettings s;
        s.ladder = ladder;
        const auto a = build_encode(s, source(640, 360), "/in/a.mp4", "/o").argv;
        auto input = std::find(a.begin(), a.end(), "-i");
        auto formats = std::find(a.begin(), a.end(), "-format_whitelist");
        ASSERT_LT(formats, input);
        EXPECT_EQ(*(formats + 1), transcode::input_restrictions()[3]);
        EXPECT_EQ((formats + 1)->find("hls"), std::string::npos);
        EXPECT_EQ((formats + 1)->find("concat"), std::string::npos);
        EXPECT_EQ(after(a, "-protocol_whitelist"), "file");
    }
}

// The output lasts no longer than the input says it does: a sparse input's last frame would
// otherwise be held as long as the gap before it. Of an unknown length there is nothing to cap.
TEST(Encode, TheOutputEndsWhereTheInputDoes) {
    for (bool ladder : {false, true}) {
        EncodeSettings s;
        s.ladder = ladder;
        MediaInfo sparse = source(160, 90);
        sparse.duration = 1200.04;
        const auto a = build_encode(s, sparse, "/in/a.mkv", "/o").argv;
        auto cap = std::find(a.begin(), a.end(), "-t");
        ASSERT_NE(cap, a.end());
        EXPECT_EQ(*(cap + 1), "1200.040000");
        EXPECT_GT(cap, std::find(a.begin(), a.end(), "-i")) << "an output option";
        MediaInfo streamed = source(160, 90);
        streamed.duration = 0;
        const auto b = build_encode(s, streamed, "/in/rec.webm", "/o").argv;
        EXPECT_EQ(std::find(b.begin(), b.end(), "-t"), b.end());
    }
}

// A video stream that ends long before the input (a still frame over 5 s of sound) has its last
// frame held to the end, no longer than the input lasts; any other keeps the original recipe.
TEST(Encode, AVideoStreamThatEndsEarlyHoldsItsLastFrame) {
    const std::string hold = "tpad=stop_mode=clone:stop_duration=5.000000,";
    MediaInfo still = source(320, 240);
    still.duration = 5;
    still.video_duration = 0.04;
    EXPECT_TRUE(transcode::holds_last_frame(still));
    EncodeSettings s;
    EXPECT_EQ(after(build_encode(s, still, "/in/a.mp4", "/o").argv, "-vf"),
              hold + "scale=trunc(iw/2)*2:trunc(ih/2)*2");
    EXPECT_EQ(after(build_encode(s, still, "/in/a.mp4", "/o").argv, "-t"), "5.000000");
    s.ladder = true;
    EXPECT_EQ(after(build_encode(s, still, "/in/a.mp4", "/o").argv, "-filter_complex"),
              "[0:v:0]" + hold + "split=1[s0];[s0]scale=320:240,setsar=1[v0]");

    MediaInfo whole = still;
    whole.video_duration = 4.5;  // within the output check's tolerance (1 s)
    MediaInfo unknown = still;
    unknown.video_duration = 0;
    MediaInfo streamed = still;  // no length to hold it to
    streamed.duration = 0;
    for (const MediaInfo& m : {whole, unknown, streamed}) {
        EXPECT_FALSE(transcode::holds_last_frame(m)) << m.video_duration << " of " << m.duration;
        for (bool ladder : {false, true}) {
            s.ladder = ladder;
            for (const auto& arg : build_encode(s, m, "/in/a.mp4", "/o").argv)
                EXPECT_EQ(arg.find("tpad"), std::string::npos) << arg;
        }
    }
}

TEST(Encode, NoAudioStreamMeansNoAudioMapping) {
    EncodeSettings s;
    auto plan = build_encode(s, source(640, 360, false), "/in/a.mp4", "/o");
    EXPECT_EQ(std::count(plan.argv.begin(), plan.argv.end(), "0:a:0"), 0);
    EXPECT_EQ(after(plan.argv, "-c:a"), "");
}

TEST(Encode, LadderHasAMasterPlaylistAndOneStreamPerRung) {
    EncodeSettings s;
    s.ladder = true;
    s.hls_time = 2;
    s.preset = "ultrafast";
    auto plan = build_encode(s, source(1280, 720), "/in/a.mp4", "/o");
    const auto& a = plan.argv;
    EXPECT_EQ(plan.playlist, "master.m3u8");
    EXPECT_EQ(after(a, "-master_pl_name"), "master.m3u8");
    EXPECT_EQ(after(a, "-var_stream_map"), "v:0,a:0,name:720p v:1,a:1,name:480p");
    EXPECT_EQ(
        after(a, "-filter_complex"),
        "[0:v:0]split=2[s0][s1];[s0]scale=1280:720,setsar=1[v0];[s1]scale=854:480,setsar=1[v1]");
    EXPECT_EQ(after(a, "-hls_segment_filename"), "/o/%v/seg_%05d.ts");
    EXPECT_EQ(a.back(), "/o/%v/index.m3u8");
    EXPECT_EQ(after(a, "-preset"), "ultrafast");
    EXPECT_FALSE(after(a, "-b:v:1").empty());
}
