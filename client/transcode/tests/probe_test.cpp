#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

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

// A phone's portrait video is stored landscape with a quarter turn to apply (a display matrix,
// or the older rotate tag): it is as tall as a player shows it, not as wide as it is stored.
TEST(Probe, AQuarterTurnStandsThePictureUpright) {
    for (const char* turn : {"|side_data|rotation=90", "|side_data|rotation=-90",
                             "|side_data|rotation=270", "|tag:rotate=90", "|tag:rotate=-270"}) {
        auto info = parse_probe_output(std::string("stream|codec_type=video|width=1920|height=1080|"
                                                   "disposition:attached_pic=0") +
                                           turn + "\nformat|duration=4.0\n",
                                       "/phone.mp4");
        EXPECT_EQ(info.width, 1080) << turn;
        EXPECT_EQ(info.height, 1920) << turn;
    }
    for (const char* turn :
         {"|side_data|rotation=180", "|tag:rotate=0", "|side_data|rotation=-180"}) {
        auto info =
            parse_probe_output(std::string("stream|codec_type=video|width=1920|height=1080") +
                                   turn + "\nformat|duration=4.0\n",
                               "/upside-down.mp4");
        EXPECT_EQ(info.width, 1920) << turn;
        EXPECT_EQ(info.height, 1080) << turn;
    }
}

// DVD's 720x480 shown 16:9: its pixels are 32:27, wider than tall. Unknown ratios are square.
TEST(Probe, AnamorphicPixelsWidenThePictureAsShown) {
    auto info = parse_probe_output(
        "stream|codec_type=video|width=720|height=480|sample_aspect_ratio=32:27\n"
        "format|duration=4.0\n",
        "/dvd.mpg");
    EXPECT_EQ(info.width, 720);
    EXPECT_EQ(info.height, 480);
    EXPECT_EQ(info.display_width(), 853);
    for (const char* sar : {"N/A", "0:1", "1:1", "junk"}) {
        auto square = parse_probe_output(std::string("stream|codec_type=video|width=640|height=360|"
                                                     "sample_aspect_ratio=") +
                                             sar + "\nformat|duration=4.0\n",
                                         "/in.mp4");
        EXPECT_EQ(square.display_width(), 640) << sar;
    }
    // Turned a quarter, the pixel's width is what was its height.
    auto turned = parse_probe_output(
        "stream|codec_type=video|width=720|height=480|sample_aspect_ratio=32:27|side_data|"
        "rotation=90\nformat|duration=4.0\n",
        "/dvd.mov");
    EXPECT_EQ(turned.width, 480);
    EXPECT_EQ(turned.height, 720);
    EXPECT_EQ(turned.display_width(), 405);
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

// A picture has no length: a PNG or JPEG (as ffprobe reads them: an image codec, an image
// demuxer, no duration), or any one-frame stream without one.
TEST(Probe, AStillImageIsNotAVideo) {
    for (const char* still :
         {"stream|codec_name=png|codec_type=video|width=64|height=48|duration=N/A|nb_frames=N/A\n"
          "format|format_name=png_pipe|duration=N/A\n",
          "stream|codec_name=mjpeg|codec_type=video|width=64|height=48|duration=N/A|nb_frames=N/A\n"
          "format|format_name=image2|duration=N/A\n",
          "stream|codec_name=webp|codec_type=video|width=64|height=48\nformat|duration=N/A\n",
          "stream|codec_name=h264|codec_type=video|width=64|height=48|duration=N/A|nb_frames=1\n"
          "format|format_name=matroska,webm|duration=N/A\n"}) {
        try {
            parse_probe_output(still, "/still.png");
            FAIL() << "expected UnusableInput for " << still;
        } catch (const UnusableInput& e) {
            EXPECT_NE(std::string(e.what()).find("/still.png: not a video (a still image"),
                      std::string::npos)
                << e.what();
        }
    }
}

// Of what ffprobe can read, only video containers of one file are videos: an HLS playlist or an
// ffconcat list is read as the files it names, wherever they are.
TEST(Probe, OnlyVideoContainersAreRead) {
    for (const char* format : {"mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm", "mpegts", "gif"})
        EXPECT_NO_THROW(parse_probe_output(
            std::string("stream|codec_name=h264|codec_type=video|width=64|height=48|nb_frames=50\n"
                        "format|format_name=") +
                format + "|duration=2.0\n",
            "/in.mp4"))
            << format;
    for (const char* format : {"hls", "concat", "dash", "sdp", "mp3"}) {
        try {
            parse_probe_output(std::string("stream|codec_name=h264|codec_type=video|width=64|"
                                           "height=48\nformat|format_name=") +
                                   format + "|duration=12.0\n",
                               "/up/evil.mp4");
            FAIL() << "expected UnusableInput for " << format;
        } catch (const UnusableInput& e) {
            EXPECT_NE(std::string(e.what()).find(
                          std::string("/up/evil.mp4: not a video file (read as ") + format),
                      std::string::npos)
                << e.what();
        }
    }
    EXPECT_TRUE(transcode::accepted_format("matroska,webm"));
    EXPECT_FALSE(transcode::accepted_format("hls"));
    EXPECT_FALSE(transcode::accepted_format("image2"));
}

// libx264 needs even sizes: a picture one pixel wide or tall cannot be encoded at all.
TEST(Probe, APictureUnderTwoPixelsIsUnusable) {
    for (const char* size : {"width=1|height=1", "width=64|height=1", "width=1|height=64"}) {
        try {
            parse_probe_output(std::string("stream|codec_name=ffv1|codec_type=video|") + size +
                                   "\nformat|format_name=matroska,webm|duration=1.0\n",
                               "/dot.mkv");
            FAIL() << "expected UnusableInput for " << size;
        } catch (const UnusableInput& e) {
            EXPECT_NE(std::string(e.what()).find("/dot.mkv: picture too small to encode ("),
                      std::string::npos)
                << e.what();
        }
    }
    auto smallest = parse_probe_output(
        "stream|codec_name=ffv1|codec_type=video|width=2|height=2\n"
        "format|format_name=matroska,webm|duration=1.0\n",
        "/dot.mkv");
    EXPECT_EQ(smallest.width, 2);
}

// A picture given a length is still a picture: image2 gives a JPEG one frame's, a GIF of one
// frame lasts its delay, an MP4 of one frame without sound lasts that frame.
TEST(Probe, AStillImageWithALengthIsNotAVideo) {
    for (const char* still :
         {"stream|codec_name=mjpeg|codec_type=video|width=160|height=90|duration=0.040000|"
          "nb_frames=N/A\nformat|format_name=image2|duration=0.040000\n",
          "stream|codec_name=mjpeg|codec_type=video|width=160|height=90|duration=0.040000|"
          "nb_frames=N/A\nformat|format_name=jpeg_pipe|duration=0.040000\n",
          "stream|codec_name=gif|codec_type=video|width=160|height=90|duration=0.100000|"
          "nb_frames=1\nformat|format_name=gif|duration=0.100000\n",
          "stream|codec_name=h264|codec_type=video|width=160|height=90|duration=0.040000|"
          "nb_frames=1\nformat|format_name=mov,mp4,m4a,3gp,3g2,mj2|duration=0.040000\n"}) {
        try {
            parse_probe_output(still, "/still.gif");
            FAIL() << "expected UnusableInput for " << still;
        } catch (const UnusableInput& e) {
            EXPECT_NE(std::string(e.what()).find("/still.gif: not a video (a still image"),
                      std::string::npos)
                << e.what();
        }
    }
}

// Moving pictures of an image codec, and a still over audio, are videos.
TEST(Probe, AnAnimationOrAStillOverAudioIsAVideo) {
    auto gif = parse_probe_output(
        "stream|codec_name=gif|codec_type=video|width=160|height=90|duration=2.000000|"
        "nb_frames=20\nformat|format_name=gif|duration=2.000000\n",
        "/anim.gif");
    EXPECT_DOUBLE_EQ(gif.duration, 2.0);
    auto podcast = parse_probe_output(
        "stream|codec_name=h264|codec_type=video|width=160|height=90|duration=0.040000|"
        "nb_frames=1\nstream|codec_name=aac|codec_type=audio|duration=30.000000\n"
        "format|format_name=mov,mp4,m4a,3gp,3g2,mj2|duration=30.000000\n",
        "/podcast.mp4");
    EXPECT_DOUBLE_EQ(podcast.duration, 30.0);
    EXPECT_TRUE(podcast.has_audio);
}

// The video stream's own length, apart from the file's: a still frame over a soundtrack lasts one
// frame. Matroska gives each track the file's length, and the real one in its DURATION tag.
TEST(Probe, TheVideoStreamsOwnLength) {
    auto mp4 = parse_probe_output(
        "stream|codec_name=h264|codec_type=video|width=160|height=90|duration=0.040000|"
        "nb_frames=1\nstream|codec_name=aac|codec_type=audio|duration=5.000000\n"
        "format|format_name=mov,mp4,m4a,3gp,3g2,mj2|duration=5.000000\n",
        "/still.mp4");
    EXPECT_DOUBLE_EQ(mp4.video_duration, 0.04);
    EXPECT_DOUBLE_EQ(mp4.duration, 5.0);
    auto mkv = parse_probe_output(
        "stream|codec_name=h264|codec_type=video|width=320|height=240|duration=5.023000|"
        "nb_frames=N/A|disposition:attached_pic=0|tag:DURATION=00:00:00.063000000\n"
        "stream|codec_name=aac|codec_type=audio|duration=N/A|nb_frames=N/A|"
        "disposition:attached_pic=0|tag:DURATION=00:00:05.023000000\n"
        "format|format_name=matroska,webm|duration=5.023000\n",
        "/still.mkv");
    EXPECT_DOUBLE_EQ(mkv.video_duration, 0.063);
    EXPECT_DOUBLE_EQ(mkv.duration, 5.023);
    auto long_mkv = parse_probe_output(
        "stream|codec_name=h264|codec_type=video|width=320|height=240|"
        "tag:DURATION=26:01:02.500000000\nformat|format_name=matroska,webm|duration=93662.5\n",
        "/long.mkv");
    EXPECT_DOUBLE_EQ(long_mkv.video_duration, 26 * 3600 + 62.5);
    // A tag of another shape is no length; the stream's (or none) stands.
    for (const char* tag : {"5", "00:61:00.0", "00:00:00.040 extra", "N/A", ""}) {
        auto odd = parse_probe_output(
            std::string("stream|codec_name=h264|codec_type=video|width=320|height=240|"
                        "duration=2.000000|tag:DURATION=") +
                tag + "\nformat|format_name=matroska,webm|duration=2.0\n",
            "/odd.mkv");
        EXPECT_DOUBLE_EQ(odd.video_duration, 2.0) << tag;
    }
    auto unknown = parse_probe_output(
        "stream|codec_name=vp8|codec_type=video|width=160|height=120|duration=N/A\n"
        "format|format_name=matroska,webm|duration=N/A\n",
        "/rec.webm");
    EXPECT_EQ(unknown.video_duration, 0) << "unknown";
}

// A browser's MediaRecorder streams WebM as it records and never writes the length: neither the
// container nor the stream has one. It is a video all the same, of a length the encode finds.
TEST(Probe, AStreamedRecordingWithNoLengthIsAVideo) {
    auto info = parse_probe_output(
        "stream|codec_name=vp8|codec_type=video|width=160|height=120|sample_aspect_ratio=1:1|"
        "duration=N/A|nb_frames=N/A|disposition:attached_pic=0\n"
        "stream|codec_name=opus|codec_type=audio|duration=N/A|nb_frames=N/A|"
        "disposition:attached_pic=0\n"
        "format|format_name=matroska,webm|duration=N/A\n",
        "/rec.webm");
    EXPECT_EQ(info.width, 160);
    EXPECT_TRUE(info.has_audio);
    EXPECT_EQ(info.duration, 0) << "unknown";
}

// A container without a length of its own, whose video stream has one, lasts that long.
TEST(Probe, TheVideoStreamsLengthWhenTheContainerHasNone) {
    auto info = parse_probe_output(
        "stream|codec_name=h264|codec_type=video|width=320|height=180|duration=4.200000\n"
        "stream|codec_name=aac|codec_type=audio|duration=9.000000\n"
        "format|format_name=mpegts|duration=N/A\n",
        "/in.ts");
    EXPECT_DOUBLE_EQ(info.duration, 4.2);
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

namespace {

// A directory holding an input file and a stand-in ffprobe that prints `err` and exits `code`.
class FakeProbe : public ::testing::Test {
  protected:
    void SetUp() override {
        root_ = std::filesystem::temp_directory_path() /
                ("hopper-probe-test-" + std::to_string(::getpid()) + "-" +
                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
        std::filesystem::create_directories(root_);
        std::ofstream(root_ / "in.mp4") << "not really a video";
    }
    void TearDown() override { std::filesystem::remove_all(root_); }
    std::string fake(int code, const std::string& err) {
        auto path = root_ / "ffprobe";
        std::ofstream(path) << "#!/bin/sh\necho '" << err << "' >&2\nexit " << code << "\n";
        std::filesystem::permissions(path, std::filesystem::perms::owner_all);
        return path.string();
    }
    std::string input() const { return (root_ / "in.mp4").string(); }
    std::filesystem::path root_;
};

}  // namespace

// ffprobe's "cannot read this file" is exit 1: the input is at fault, and no retry helps.
TEST_F(FakeProbe, ExitOneIsAnUnusableInput) {
    try {
        transcode::probe(fake(1, "Invalid data found when processing input"), input(), [] {});
        FAIL() << "expected UnusableInput";
    } catch (const UnusableInput& e) {
        EXPECT_NE(std::string(e.what()).find("Invalid data"), std::string::npos) << e.what();
    }
}

// ffprobe refuses a format off the list before reading it, naming the demuxer in its message.
TEST_F(FakeProbe, ARefusedFormatIsNamed) {
    try {
        transcode::probe(fake(1, "[concat @ 0x55d3fff3a540] Format not on whitelist x"), input(),
                         [] {});
        FAIL() << "expected UnusableInput";
    } catch (const UnusableInput& e) {
        EXPECT_NE(std::string(e.what()).find("in.mp4: not a video file (read as concat,"),
                  std::string::npos)
            << e.what();
    }
}

// image2 reads by the name: a name with %d is a numbered sequence of other files.
TEST_F(FakeProbe, AnImageSequenceIsRefusedAsSuch) {
    try {
        transcode::probe(fake(1, "[image2 @ 0x5572] Format not on whitelist x"), input(), [] {});
        FAIL() << "expected UnusableInput";
    } catch (const UnusableInput& e) {
        EXPECT_NE(
            std::string(e.what()).find(
                "in.mp4: not a video (a still image, or a numbered sequence of them: image2)"),
            std::string::npos)
            << e.what();
    }
}

// The arguments restrict the probe before the input is named.
TEST_F(FakeProbe, TheInputIsRestrictedToVideoContainers) {
    auto path = root_ / "ffprobe";
    auto args_file = root_ / "args";
    std::ofstream(path) << "#!/bin/sh\nprintf '%s\\n' \"$@\" >" << args_file.string()
                        << "\nexit 1\n";
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    EXPECT_THROW(transcode::probe(path.string(), input(), [] {}), UnusableInput);
    std::ifstream in(args_file);
    std::string args((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto formats = args.find("-format_whitelist\nmov,matroska,");
    EXPECT_NE(formats, std::string::npos) << args;
    EXPECT_NE(args.find("-protocol_whitelist\nfile\n"), std::string::npos) << args;
    EXPECT_EQ(args.find("hls"), std::string::npos) << args;
    EXPECT_LT(formats, args.find("file:" + input())) << args;
}

// Any other status is about ffprobe itself (127: it could not run): a failure to retry, which
// must not bury the video as unusable.
TEST_F(FakeProbe, ABrokenProbeIsNotTheInputsFault) {
    for (int code : {127, 126, 2}) {
        try {
            transcode::probe(fake(code, "error while loading shared libraries"), input(), [] {});
            FAIL() << "expected a failure for exit " << code;
        } catch (const UnusableInput& e) {
            FAIL() << "exit " << code << " was taken for an unusable input: " << e.what();
        } catch (const std::runtime_error& e) {
            EXPECT_NE(std::string(e.what()).find("shared libraries"), std::string::npos)
                << e.what();
        }
    }
}

// The real ffprobe names the input in its error with the name's control characters other than
// line breaks (and \b \t \v \f) as '?': its line breaks are escaped all the same, so a crafted
// name forges no line of the worker's in the error (the row's, the job's, the log's).
TEST_F(FakeProbe, ARealProbesMentionOfACraftedNameStartsNoLine) {
    if (std::system("command -v ffprobe >/dev/null 2>&1") != 0) GTEST_SKIP() << "no ffprobe";
    const std::string forged = "job 1 video v1: processed in 1.0s";
    const auto path = root_ / ("ctl\n" + forged + "\x01\x1B.mp4");
    std::filesystem::copy_file(input(), path);
    try {
        transcode::probe("ffprobe", path.string(), [] {});
        FAIL() << "expected UnusableInput";
    } catch (const UnusableInput& e) {
        const std::string what = e.what();
        EXPECT_EQ(what.find("\n" + forged), std::string::npos) << what;
        // ffprobe's own line, as it printed the name.
        EXPECT_NE(what.find("file:" + root_.string() + "/ctl\\x0A" + forged + "??.mp4: "),
                  std::string::npos)
            << what;
    }
}
