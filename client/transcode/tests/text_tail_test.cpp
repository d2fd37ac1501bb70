#include <gtest/gtest.h>

#include "text_tail.hpp"
#include "hopper/json.hpp"
#include "hopper/utf8.hpp"

using hopper::valid_utf8;
using transcode::TextTail;

namespace {

// What PostgreSQL accepts as text: valid UTF-8 (checked here by a round trip through the strict
// converter, which changes nothing that is valid) and no NUL.
bool acceptable(const std::string& s) {
    return s.find('\0') == std::string::npos && valid_utf8(s) == s;
}

const std::string kFffd = "\xEF\xBF\xBD";

}  // namespace

TEST(Utf8, ValidTextIsKept) {
    std::string s = "caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x8E\xAC ok";
    EXPECT_EQ(valid_utf8(s), s);
}

TEST(Utf8, InvalidBytesAndNulsAreReplaced) {
    // A Latin-1 file name, a NUL, a stray continuation byte.
    EXPECT_EQ(valid_utf8(std::string("caf\xE9.mp4\0x\x80", 11)),
              "caf" + kFffd + ".mp4" + kFffd + "x" + kFffd);
    // Overlong forms, surrogates and code points past U+10FFFF are not UTF-8 either.
    EXPECT_EQ(valid_utf8("\xC0\xAF"), kFffd + kFffd);
    EXPECT_EQ(valid_utf8("\xED\xA0\x80"), kFffd + kFffd + kFffd);
    EXPECT_EQ(valid_utf8("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);
    // A sequence cut off at the end of the text.
    EXPECT_EQ(valid_utf8("ab\xE2\x82"), "ab" + kFffd + kFffd);
}

TEST(Utf8, CutsAtACharacterBoundary) {
    EXPECT_EQ(valid_utf8("a\xC3\xA9", 2), "a");
    EXPECT_EQ(valid_utf8("a\xC3\xA9", 3), "a\xC3\xA9");
}

TEST(Utf8, EscapedShowsEachStrayByte) {
    EXPECT_EQ(hopper::escaped_utf8("caf\xC3\xA9 ok"), "caf\xC3\xA9 ok");
    EXPECT_EQ(hopper::escaped_utf8(std::string("v\xFF.mp4\0\xC0\xAF", 9)),
              "v\\xFF.mp4\\x00\\xC0\\xAF");
    EXPECT_EQ(hopper::escaped_utf8("ab\xE2\x82"), "ab\\xE2\\x82");
}

// A backslash is doubled: otherwise the byte 0xE9 and the four characters \xE9 read the same.
TEST(Utf8, EscapedTellsABackslashFromAnEscapedByte) {
    EXPECT_EQ(hopper::escaped_utf8("caf\xE9.mp4"), "caf\\xE9.mp4");
    EXPECT_EQ(hopper::escaped_utf8("caf\\xE9.mp4"), "caf\\\\xE9.mp4");
    EXPECT_NE(hopper::escaped_utf8("caf\xE9.mp4"), hopper::escaped_utf8("caf\\xE9.mp4"));
    EXPECT_EQ(hopper::escaped_utf8("a\\b\xFF"), "a\\\\b\\xFF");
}

// quote keeps the bytes of the session's encoding: a Latin-1 session's payload naming a Latin-1
// file reaches the server as Latin-1, which the server converts; replacing its bytes with U+FFFD
// named a file that does not exist (test/e2e/transcode_non_utf8.sh).
TEST(JsonQuote, KeepsTheSessionsBytes) {
    EXPECT_EQ(hopper::json::quote("v\xFF.mp4"), "\"v\xFF.mp4\"");
    EXPECT_EQ(hopper::json::quote("caf\xC3\xA9 \xF0\x9F\x8E\xAC"),
              "\"caf\xC3\xA9 \xF0\x9F\x8E\xAC\"");
    EXPECT_EQ(hopper::json::quote(std::string("a\0\"\\\n\x01", 6)),
              "\"a\\u0000\\\"\\\\\\n\\u0001\"");
}

TEST(TextTail, LongLinesAreCutBetweenCharacters) {
    // 399 ASCII bytes then 'é' (2 bytes): a cut at byte 400 would split it.
    std::string line = std::string(399, 'x') + "\xC3\xA9" + std::string(50, 'y');
    TextTail tail;
    tail.append(line + "\n" + line);  // a finished line and an unfinished one
    std::string text = tail.text();
    EXPECT_TRUE(acceptable(text));
    EXPECT_EQ(text, std::string(399, 'x') + "\n" + std::string(399, 'x'));
}

TEST(TextTail, AnyBytesBecomeAcceptableText) {
    TextTail tail(5, 40);
    std::string noise;
    for (int i = 0; i < 2000; ++i) noise += static_cast<char>((i * 37 + i / 7) & 0xFF);
    // In pieces that split sequences between reads, as a pipe does.
    for (size_t i = 0; i < noise.size(); i += 7) tail.append(noise.substr(i, 7));
    std::string text = tail.text();
    EXPECT_FALSE(text.empty());
    EXPECT_TRUE(acceptable(text));
    std::string latin1 = "Input #0, from 'file:/uploads/caf\xE9.mp4':";
    TextTail t2;
    t2.append(latin1 + "\n");
    EXPECT_EQ(t2.text(), "Input #0, from 'file:/uploads/caf" + kFffd + ".mp4':");
}
