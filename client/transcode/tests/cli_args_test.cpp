#include <gtest/gtest.h>

#include "cli_args.hpp"

using transcode::Args;
using transcode::parse_args;
using transcode::parse_duration;
using transcode::UsageError;

namespace {
Args parse(std::vector<const char*> v) {
    v.insert(v.begin(), "hopper-transcode");
    return parse_args(static_cast<int>(v.size()), v.data());
}
}  // namespace

TEST(CliArgs, Submit) {
    auto a = parse({"submit", "clip.mp4", "--id", "v1", "--queue=videos"});
    EXPECT_EQ(a.command, Args::Command::Submit);
    EXPECT_EQ(a.submit.file, "clip.mp4");
    EXPECT_EQ(a.submit.id, "v1");
    EXPECT_EQ(a.queue, "videos");
    EXPECT_THROW(parse({"submit"}), UsageError);
    EXPECT_THROW(parse({"submit", "a", "b"}), UsageError);
}

TEST(CliArgs, RunOptions) {
    auto a = parse({"run", "--concurrency", "3", "--ladder", "--hls-time", "2", "--timeout", "90s",
                    "--lease=3s", "--max-jobs", "1", "--exit-when-idle", "--preset", "ultrafast",
                    "--output-dir", "/tmp/o"});
    EXPECT_EQ(a.command, Args::Command::Run);
    EXPECT_EQ(a.run.concurrency, 3);
    EXPECT_TRUE(a.run.encode.ladder);
    EXPECT_EQ(a.run.encode.hls_time, 2);
    EXPECT_EQ(a.run.timeout, std::chrono::seconds(90));
    EXPECT_EQ(a.run.lease, std::chrono::seconds(3));
    EXPECT_EQ(a.run.max_jobs, 1);
    EXPECT_TRUE(a.run.exit_when_idle);
    EXPECT_EQ(a.run.encode.preset, "ultrafast");
    EXPECT_EQ(a.run.output_dir, "/tmp/o");
}

TEST(CliArgs, NoSessionBound) {
    EXPECT_EQ(parse({"run"}).run.session_bound, std::nullopt);
    EXPECT_EQ(parse({"run", "--no-session-bound"}).run.session_bound, false);
    EXPECT_THROW(parse({"run", "--no-session-bound=yes"}), UsageError);
    EXPECT_THROW(parse({"submit", "a.mp4", "--no-session-bound"}), UsageError);
}

TEST(CliArgs, Defaults) {
    auto a = parse({"run"});
    EXPECT_EQ(a.queue, "transcode");
    EXPECT_EQ(a.run.encode.hls_time, 10);
    EXPECT_FALSE(a.run.encode.ladder);
    EXPECT_FALSE(a.run.timeout.has_value());
    EXPECT_FALSE(a.run.max_jobs.has_value());
}

TEST(CliArgs, LadderHeightsImplyLadder) {
    auto a = parse({"run", "--ladder-heights", "720p,360"});
    EXPECT_TRUE(a.run.encode.ladder);
    EXPECT_EQ(a.run.encode.ladder_heights, (std::vector<int>{720, 360}));
}

TEST(CliArgs, Errors) {
    EXPECT_THROW(parse({}), UsageError);
    EXPECT_THROW(parse({"transmogrify"}), UsageError);
    EXPECT_THROW(parse({"run", "--concurrency", "0"}), UsageError);
    EXPECT_THROW(parse({"run", "--hls-time"}), UsageError);
    EXPECT_THROW(parse({"run", "--preset", "fastest"}), UsageError);
    // A '%' in --output-dir is refused by run_command, once the directory is absolute
    // (test/e2e/transcode_output_dir.sh).
    EXPECT_THROW(parse({"run", "--id", "x"}), UsageError);  // a submit option
    EXPECT_THROW(parse({"run", "--ladder=yes"}), UsageError);
    EXPECT_THROW(parse({"run", "--bogus"}), UsageError);
}

// What the server refuses at every pull is refused at start: a worker started with it would
// retry its pull forever and never take a job.
TEST(CliArgs, ServerLimitsAreCheckedAtStart) {
    auto refused = [](std::vector<const char*> v, const std::string& says) {
        try {
            parse(v);
            ADD_FAILURE() << "accepted " << v.back();
        } catch (const UsageError& e) {
            EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
        }
    };
    refused({"run", "--lease", "48h"}, "--lease must be from 1s to 24h");
    refused({"run", "--lease", "24.001h"}, "--lease must be from 1s to 24h");
    refused({"run", "--lease", "86401"}, "--lease must be from 1s to 24h");
    EXPECT_EQ(parse({"run", "--lease", "24h"}).run.lease, std::chrono::hours(24));
    for (const char* q : {"bad name!", "-lead", "_lead", "done", "caf\xC3\xA9", ""})
        refused({"run", "--queue", q}, "--queue");
    refused({"submit", "--queue", "a/b", "x.mp4"}, "--queue: invalid queue name \"a/b\"");
    std::string longest(48, 'q');
    EXPECT_EQ(parse({"run", "--queue", longest.c_str()}).queue, longest);
    std::string too_long(49, 'q');
    refused({"run", "--queue", too_long.c_str()}, "--queue");
    EXPECT_EQ(parse({"run", "--queue", "v1.video_hd:eu-west"}).queue, "v1.video_hd:eu-west");
    std::string name(128, 'n');
    EXPECT_EQ(parse({"run", "--name", name.c_str()}).run.name, name);
    name += 'n';
    refused({"run", "--name", name.c_str()}, "--name is 129 bytes long; the limit is 128");
}

// What the database holds as text, checked in a UTF-8 session before anything is written.
TEST(CliArgs, RequireUtf8NamesTheValueAndItsStrayBytes) {
    EXPECT_NO_THROW(transcode::require_utf8("FILE", "vid\xC3\xA9o.mp4", "why"));
    try {
        transcode::require_utf8("--name", "w\xFF", "the reason");
        ADD_FAILURE() << "not refused";
    } catch (const UsageError& e) {
        EXPECT_STREQ(e.what(), "--name \"w\\xFF\" is not valid UTF-8: the reason");
    }
}

TEST(CliArgs, Durations) {
    EXPECT_EQ(parse_duration("90"), std::chrono::seconds(90));
    EXPECT_EQ(parse_duration("1.5s"), std::chrono::milliseconds(1500));
    EXPECT_EQ(parse_duration("500ms"), std::chrono::milliseconds(500));
    EXPECT_EQ(parse_duration("2m"), std::chrono::minutes(2));
    EXPECT_EQ(parse_duration("1h"), std::chrono::hours(1));
    EXPECT_THROW(parse_duration("soon"), UsageError);
    EXPECT_THROW(parse_duration("5 days"), UsageError);
    EXPECT_THROW(parse_duration("-1s"), UsageError);
    // Too large to hold: refused, never wrapped to a small or negative time.
    EXPECT_THROW(parse_duration("1e15h"), UsageError);
    EXPECT_THROW(parse_duration("9000h"), UsageError);
    EXPECT_EQ(parse_duration("8760h"), std::chrono::hours(8760));
}

TEST(CliArgs, AudioBitrate) {
    EXPECT_EQ(parse({"run", "--audio-bitrate", "96k"}).run.encode.audio_bitrate, "96k");
    EXPECT_EQ(parse({"run", "--audio-bitrate=128000"}).run.encode.audio_bitrate, "128000");
    EXPECT_EQ(parse({"run", "--audio-bitrate", "0.5M"}).run.encode.audio_bitrate, "0.5M");
    EXPECT_EQ(parse({"run", "--audio-bitrate", "192K"}).run.encode.audio_bitrate, "192K");
    EXPECT_EQ(parse({"run"}).run.encode.audio_bitrate, "128k");
    // Each of these started a worker whose every job with audio failed until dead.
    for (const char* bad : {"lots", "", "0", "0k", "128", "128kb", "-128k", "1.2.3k", ".5M", "5.M",
                            "128m", "2M", "1e5", " 128k"})
        EXPECT_THROW(parse({"run", "--audio-bitrate", bad}), UsageError) << bad;
}

TEST(CliArgs, EndOfOptions) {
    // An upload whose name starts with '-' was refused as an unknown option.
    auto a = parse({"submit", "--id", "v1", "--", "-clip.mp4"});
    EXPECT_EQ(a.submit.file, "-clip.mp4");
    EXPECT_EQ(a.submit.id, "v1");
    EXPECT_EQ(parse({"submit", "--", "--id=x"}).submit.file, "--id=x");
    EXPECT_EQ(parse({"status", "--", "--help"}).status.id, "--help");
    EXPECT_THROW(parse({"submit", "-clip.mp4"}), UsageError);
    EXPECT_THROW(parse({"submit", "--", "a", "b"}), UsageError);
    EXPECT_THROW(parse({"run", "--", "x"}), UsageError);
}
