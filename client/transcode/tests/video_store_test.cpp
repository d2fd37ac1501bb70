// transcode.videos against a real server: the row a job's attempt writes while it runs is that
// attempt's only while it still holds the job.
#include <gtest/gtest.h>

#include <chrono>

#include "support.hpp"
#include "video_store.hpp"

using namespace std::chrono_literals;
using hopper::test::conninfo;
using hopper::test::unique_queue;

namespace transcode {
namespace {

class VideoStoreTest : public ::testing::Test {
  protected:
    void SetUp() override { ensure_schema(c); }

    std::string field(const std::string& video, const std::string& column) {
        auto r = c.exec("SELECT COALESCE(" + column +
                            "::text, '<null>') FROM transcode.videos "
                            "WHERE id = $1",
                        video);
        return std::string(r.text(0, 0));
    }

    // The job's lease runs out and another worker takes it over: pulled again as if a day later.
    hopper::Job take_over(const std::string& queue) {
        hopper::PullOptions later;
        later.at = hopper::Clock::now() + 24h;
        auto jobs = c.pull(queue, later);
        EXPECT_EQ(jobs.size(), 1u);
        return jobs.at(0);
    }

    hopper::Client c{conninfo()};
};

// The old worker has not noticed yet (its next heartbeat would tell it): its failure and its probe
// must leave the new owner's row alone, or the video reads as failed while it is being encoded.
TEST_F(VideoStoreTest, AWorkerWhoseLeaseWasTakenOverWritesNothing) {
    std::string q = unique_queue("takeover");
    Submitted s = submit_video(c, q, std::string("takeover"), "/in/a.mp4", std::nullopt);
    hopper::Job old_run = c.pull(q).at(0);
    ASSERT_TRUE(claim_video(c, s.video_id, s.job_id));
    hopper::Job new_run = take_over(q);
    ASSERT_NE(new_run.lease_token, old_run.lease_token);
    ASSERT_TRUE(claim_video(c, s.video_id, s.job_id));

    MediaInfo old_probe{12.5, 640, 360, true};
    record_probe(c, s.video_id, s.job_id, old_run.lease_token, old_probe);
    EXPECT_FALSE(mark_failed(c, s.video_id, s.job_id, old_run.lease_token, "ffmpeg died", true));
    EXPECT_EQ(field(s.video_id, "processing_status"), "processing");
    EXPECT_EQ(field(s.video_id, "error"), "<null>");
    EXPECT_EQ(field(s.video_id, "width"), "<null>");

    // The owner itself still writes.
    MediaInfo probe{30, 1280, 720, true};
    record_probe(c, s.video_id, s.job_id, new_run.lease_token, probe);
    EXPECT_EQ(field(s.video_id, "width"), "1280");
    EXPECT_TRUE(mark_failed(c, s.video_id, s.job_id, new_run.lease_token, "disk full", false));
    EXPECT_EQ(field(s.video_id, "processing_status"), "pending");
    EXPECT_EQ(field(s.video_id, "error"), "disk full");
}

// A job stopped by the worker's shutdown is released only once its handler returns, after the
// handler has marked its row pending: the row is marked while the job is still the handler's. A
// worker whose lease was taken over leaves the new owner's row alone.
TEST_F(VideoStoreTest, AStoppedWorkerMarksItsRowPendingWhileItStillHoldsTheJob) {
    std::string q = unique_queue("pending");
    Submitted s = submit_video(c, q, std::string("pending"), "/in/a.mp4", std::nullopt);
    hopper::Job old_run = c.pull(q).at(0);
    ASSERT_TRUE(claim_video(c, s.video_id, s.job_id));
    mark_pending(c, s.video_id, s.job_id, old_run.lease_token);
    EXPECT_EQ(field(s.video_id, "processing_status"), "pending");

    ASSERT_TRUE(claim_video(c, s.video_id, s.job_id));
    hopper::Job new_run = take_over(q);
    ASSERT_NE(new_run.lease_token, old_run.lease_token);
    ASSERT_TRUE(claim_video(c, s.video_id, s.job_id));
    mark_pending(c, s.video_id, s.job_id, old_run.lease_token);
    EXPECT_EQ(field(s.video_id, "processing_status"), "processing");
}

// A cancelled job has no lease left to check: its row still becomes failed ("cancelled"), but
// not once the job was retried and runs again.
TEST_F(VideoStoreTest, ACancelledJobsRowFailsUntilTheJobIsRetried) {
    std::string q = unique_queue("cancel");
    Submitted s = submit_video(c, q, std::string("cancel"), "/in/b.mp4", std::nullopt);
    hopper::Job run = c.pull(q).at(0);
    ASSERT_TRUE(claim_video(c, s.video_id, s.job_id));
    ASSERT_TRUE(c.cancel(s.job_id));
    EXPECT_FALSE(mark_failed(c, s.video_id, s.job_id, run.lease_token, "killed", false))
        << "the cancel, not the killed encode, decides what the row says";
    EXPECT_TRUE(mark_cancelled(c, s.video_id, s.job_id));
    EXPECT_EQ(field(s.video_id, "processing_status"), "failed");
    EXPECT_EQ(field(s.video_id, "error"), "cancelled");

    ASSERT_TRUE(c.retry(s.job_id));
    c.pull(q).at(0);
    ASSERT_TRUE(claim_video(c, s.video_id, s.job_id));
    EXPECT_FALSE(mark_cancelled(c, s.video_id, s.job_id));
    EXPECT_EQ(field(s.video_id, "processing_status"), "processing");
}

// A queue that keeps no history forgets a cancelled job: the run that held it says "cancelled"
// only while its own row is as it left it, and corrects the settler's unknowing reason.
TEST_F(VideoStoreTest, AJobGoneFromAQueueWithoutHistorySettlesItsRow) {
    std::string q = unique_queue("unkept");
    hopper::QueueOptions no_history;
    no_history.retention = std::chrono::seconds(0);
    c.queue_create(q, no_history);

    Submitted s = submit_video(c, q, std::string("unkept"), "/in/c.mp4", std::nullopt);
    c.pull(q).at(0);
    auto stamp = claim_video(c, s.video_id, s.job_id);
    ASSERT_TRUE(stamp);
    EXPECT_FALSE(job_gone(c, s.job_id));
    ASSERT_TRUE(c.cancel(s.job_id));
    EXPECT_TRUE(job_gone(c, s.job_id));
    // The settler (another worker's, say) gets there first and cannot tell how the job ended.
    EXPECT_EQ(settle_ended_jobs(c, s.video_id), std::vector<std::string>{s.video_id});
    EXPECT_EQ(field(s.video_id, "error"), unkept_end_error(s.job_id));
    EXPECT_EQ(mark_ended_unkept(c, s.video_id, s.job_id, stamp, true), "cancelled");
    EXPECT_EQ(field(s.video_id, "processing_status"), "failed");

    // A later run claimed the row since (the job was rescued, then ended unseen): no "cancelled".
    Submitted t = submit_video(c, q, std::string("unkept"), "/in/c.mp4", std::nullopt);
    c.pull(q).at(0);
    auto first = claim_video(c, t.video_id, t.job_id);
    ASSERT_TRUE(first);
    ASSERT_TRUE(claim_video(c, t.video_id, t.job_id));
    ASSERT_TRUE(c.cancel(t.job_id));
    EXPECT_EQ(mark_ended_unkept(c, t.video_id, t.job_id, first, true), unkept_end_error(t.job_id));
    // A settled row is not the run's to write again.
    EXPECT_EQ(mark_ended_unkept(c, t.video_id, t.job_id, first, false), std::nullopt);

    // In a transaction (as submit asks), the probe leaves the transaction usable.
    hopper::Transaction tx(c);
    EXPECT_TRUE(job_gone(c, t.job_id));
    EXPECT_EQ(c.exec("SELECT 1").rows(), 1);
    tx.commit();
}

// A Shift-JIS session's upload: the job's payload names the file the row does. Quoted byte by
// byte, 表 (0x95 0x5C) took the "n" after it for an escape, and the path held a line break.
TEST_F(VideoStoreTest, ThePayloadNamesASjisSessionsFileAsTheRowDoes) {
    std::string q = unique_queue("sjis");
    hopper::Client sjis(conninfo() + " client_encoding=SJIS");
    Submitted s = submit_video(sjis, q, std::string("sjis"),
                               "/in/\x95\x5C"
                               "n.mp4",
                               std::nullopt);
    const std::string utf8_path =
        "/in/\xE8\xA1\xA8"
        "n.mp4";
    EXPECT_EQ(field(s.video_id, "raw_file_path"), utf8_path);
    EXPECT_EQ(c.exec("SELECT payload->>'path' FROM hopper.job_status($1)", s.job_id).text(0, 0),
              utf8_path);
}

}  // namespace
}  // namespace transcode
