// Text in a client_encoding whose characters can hold the byte 0x5C, the backslash, after their
// first (SJIS, BIG5, GBK, GB18030, UHC, JOHAB): the server converts it from that encoding, so the
// escapes the client adds must be its characters' own. Escaped byte by byte, 表 (0x95 0x5C in
// Shift-JIS) became 表 and a backslash, which ended the text early: every array argument holding
// one was "malformed array literal" (22P02), and json::quote("表n.mp4") named a file with a line
// break in it.
#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hopper/client.hpp"
#include "hopper/json.hpp"
#include "support.hpp"

using hopper::test::conninfo;
using hopper::test::unique_queue;

namespace hopper {
namespace {

// 表 (U+8868): 0x95 0x5C in Shift-JIS.
const std::string kHyoSjis = "\x95\x5C";
const std::string kHyoUtf8 = "\xE8\xA1\xA8";
// ソ (U+30BD): 0x83 0x5C in Shift-JIS.
const std::string kSoSjis = "\x83\x5C";
const std::string kSoUtf8 = "\xE3\x82\xBD";

class SjisSession : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(sjis.exec("SHOW client_encoding").text(0, 0), "SJIS");
        ASSERT_EQ(utf8.exec("SHOW server_encoding").text(0, 0), "UTF8");
    }

    // The database's text, read by a UTF-8 session.
    std::string stored(const std::string& sql, int64_t id) {
        return std::string(utf8.exec(sql, id).text(0, 0));
    }

    Client sjis{conninfo() + " client_encoding=SJIS"};
    Client utf8{conninfo()};
};

TEST_F(SjisSession, PushBatchKeepsCharactersEndingInABackslashByte) {
    std::string q = unique_queue("sjis_batch");
    BatchPushOptions o;
    // A lone backslash and quote beside them are still escaped.
    o.dedup_keys = {"d" + kHyoSjis + "\\" + kSoSjis};
    o.concurrency_keys = {kSoSjis + "\"c" + kHyoSjis};
    std::vector<int64_t> ids =
        sjis.push_batch(q, {R"({"a": ")" + kHyoSjis + R"(", "b": "x\\)" + kSoSjis + R"("})"}, o);
    ASSERT_EQ(ids.size(), 1u);
    EXPECT_EQ(stored("SELECT payload->>'a' FROM hopper.job_status($1)", ids[0]), kHyoUtf8);
    EXPECT_EQ(stored("SELECT payload->>'b' FROM hopper.job_status($1)", ids[0]), "x\\" + kSoUtf8);
    EXPECT_EQ(stored("SELECT dedup_key FROM hopper.jobs WHERE id = $1", ids[0]),
              "d" + kHyoUtf8 + "\\" + kSoUtf8);
    EXPECT_EQ(stored("SELECT concurrency_key FROM hopper.jobs WHERE id = $1", ids[0]),
              kSoUtf8 + "\"c" + kHyoUtf8);
    // The same key from a UTF-8 session names the same job.
    BatchPushOptions again;
    again.dedup_keys = {"d" + kHyoUtf8 + "\\" + kSoUtf8};
    EXPECT_EQ(utf8.push_batch(q, {"{}"}, again), ids);
}

TEST_F(SjisSession, PullAndTakeFilterOnSuchKinds) {
    std::string q = unique_queue("sjis_kinds");
    PushOptions po;
    po.kind = kHyoSjis;
    int64_t pulled = sjis.push(q, "{}", po);
    int64_t begun = sjis.push(q, "{}", po);
    int64_t completed_with = sjis.push(q, "{}", po);
    int64_t taken = sjis.push(q, "{}", po);
    EXPECT_EQ(stored("SELECT kind FROM hopper.job_status($1)", pulled), kHyoUtf8);

    PullOptions o;
    o.kinds = {kHyoSjis, kSoSjis + "\\"};
    std::vector<Job> jobs = sjis.pull(q, o);
    ASSERT_EQ(jobs.size(), 1u);
    const Job first = jobs[0];
    EXPECT_EQ(first.id, pulled);
    EXPECT_EQ(first.kind, kHyoSjis);

    // A waiting pull's, as the worker sends it.
    sjis.begin_pull(q, o);
    while (!sjis.pull_ready()) sjis.connection().wait(std::chrono::milliseconds(100));
    jobs = sjis.finish_pull();
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].id, begun);

    std::vector<int64_t> done;
    jobs = sjis.complete_many_and_pull({first.id}, {first.lease_token}, {}, q, o, done);
    EXPECT_EQ(done, std::vector<int64_t>{first.id});
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].id, completed_with);

    Transaction tx(sjis);
    TakeOptions t;
    t.kinds = {kHyoSjis};
    jobs = sjis.take(q, t);
    ASSERT_EQ(jobs.size(), 1u);
    EXPECT_EQ(jobs[0].id, taken);
    tx.commit();
}

TEST_F(SjisSession, CompleteManyKeepsSuchResults) {
    std::string q = unique_queue("sjis_results");
    int64_t id = sjis.push(q, "{}");
    Job j = sjis.pull(q).at(0);
    std::vector<int64_t> done =
        sjis.complete_many({id}, {j.lease_token}, {R"({"r": ")" + kHyoSjis + R"("})"});
    ASSERT_EQ(done, std::vector<int64_t>{id});
    EXPECT_EQ(stored("SELECT result->>'r' FROM hopper.job_status($1)", id), kHyoUtf8);
}

// The transcoder's payload: json::quote of a file name, read in the session's encoding. Byte by
// byte, "表n.mp4" read back as 表, a line break and ".mp4".
TEST_F(SjisSession, JsonQuoteInTheSessionsEncodingRoundTrips) {
    const int enc = sjis.connection().client_encoding();
    const std::string name = "/up/" + kHyoSjis + "n.mp4";
    EXPECT_EQ(json::quote(name, enc), "\"" + name + "\"");
    // A character of one byte is escaped as ever.
    const std::string odd = kSoSjis + "\\\"\n\x01" + kHyoSjis;
    EXPECT_EQ(json::quote(odd, enc), "\"" + kSoSjis + "\\\\\\\"\\n\\u0001" + kHyoSjis + "\"");
    // A lead byte last, with nothing after it to read, is a byte of its own.
    EXPECT_EQ(json::quote("a\x95", enc), "\"a\x95\"");

    std::string q = unique_queue("sjis_quote");
    int64_t id = sjis.push(
        q, "{\"path\": " + json::quote(name, enc) + ", \"odd\": " + json::quote(odd, enc) + "}");
    EXPECT_EQ(stored("SELECT payload->>'path' FROM hopper.job_status($1)", id),
              "/up/" + kHyoUtf8 + "n.mp4");
    EXPECT_EQ(stored("SELECT payload->>'odd' FROM hopper.job_status($1)", id),
              kSoUtf8 + "\\\"\n\x01" + kHyoUtf8);
    // Read back in the session's encoding, the payload holds the name's bytes again.
    EXPECT_NE(sjis.job_status(id).payload.find(name), std::string::npos);
}

// In UTF-8 (and every encoding a database can have) no byte of a wider character is below 0x80:
// both forms escape the same.
TEST_F(SjisSession, JsonQuoteInUtf8IsByteByByte) {
    const int enc = utf8.connection().client_encoding();
    for (std::string s :
         {std::string("caf\xC3\xA9 \\ \" \n"), kHyoUtf8 + "\\n", std::string("v\xFF")})
        EXPECT_EQ(json::quote(s, enc), json::quote(s)) << s;
}

}  // namespace
}  // namespace hopper
