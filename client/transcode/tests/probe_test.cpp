#include <gtest/gtest.h>

#include "probe.hpp"

using transcode::parse_probe_output;
using transcode::UnusableInput;

TEST(Probe, VideoWithAudio) {
    auto info = parse_probe_output(
        "stream|codec_type=video|width=640|height=360|disposition:attached_pic=0\n"
        "stream|codec_type=audio|disposition:attached_pic=0\n"
        "format|duration=3.040000\n",
        "/in.mp4");
    EXPECT_EQ(info.width, 640);
    EXPECT_EQ(info.height, 360);
    EXPECT_TRUE(info.has_audio);
    EXPECT_DOUBLE_EQ(info.duration, 3.04);
}

TEST(Probe, FirstVideoStreamWinsAndAudioIsOptional) {
    auto info = parse_probe_output(
        "stream|codec_type=video|width=1280|height=720\n"
        "stream|codec_type=video|width=320|height=240\n"
        "format|duration=2.0\n",
        "/in.mkv");
    EXPECT_EQ(info.width, 1280);
    EXPECT_FALSE(info.has_audio);
}

TEST(Probe, AudioOnlyOrCoverArtIsNotAVideo) {
    EXPECT_THROW(parse_probe_output("stream|codec_type=audio\nformat|duration=3.0\n", "/a.mp3"),
                 UnusableInput);
    EXPECT_THROW(parse_probe_output("stream|codec_type=audio|disposition:attached_pic=0\n"
                                    "stream|codec_type=video|width=500|height=500|"
                                    "disposition:attached_pic=1\nformat|duration=3.0\n",
                                    "/a.mp3"),
                 UnusableInput);
}

TEST(Probe, NoDurationIsNotAVideo) {
    try {
        parse_probe_output("stream|codec_type=video|width=64|height=64\nformat|duration=N/A\n",
                           "/still.png");
        FAIL() << "expected UnusableInput";
    } catch (const UnusableInput& e) {
        EXPECT_NE(std::string(e.what()).find("/still.png"), std::string::npos);
    }
}

TEST(Probe, MissingFileIsUnusable) {
    try {
        transcode::probe("ffprobe", "/nonexistent/dir/video.mp4", [] {});
        FAIL() << "expected UnusableInput";
    } catch (const UnusableInput& e) {
        EXPECT_NE(std::string(e.what()).find("not found"), std::string::npos) << e.what();
    }
}

TEST(Probe, FileUrlKeepsPathsFromBeingOptionsOrUrls) {
    EXPECT_EQ(transcode::file_url("/x/-y.mp4"), "file:/x/-y.mp4");
}
