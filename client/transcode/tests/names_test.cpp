#include <gtest/gtest.h>

#include "names.hpp"

using transcode::NameMask;
using transcode::shown_name;

TEST(Names, LineBreaksInANameAreShownEscaped) {
    EXPECT_EQ(shown_name("/up/a\njob 9 video 9: processed\r.mp4"),
              "/up/a\\x0Ajob 9 video 9: processed\\x0D.mp4");
    EXPECT_EQ(shown_name("/up/plain \x1B.mp4"), "/up/plain \x1B.mp4");  // left to the terminal rule
}

// ffprobe's error names the input: the name is replaced wherever the chunks cut it.
TEST(Names, AProgramsOutputShowsTheNameEscapedHoweverChunked) {
    const std::string name = "/up/a\njob 9 video 9: processed\n.mp4";
    const std::string output = "file:" + name + ": Invalid data found\nfile:" + name + ": again\n";
    const std::string expected =
        "file:" + shown_name(name) + ": Invalid data found\nfile:" + shown_name(name) + ": again\n";
    for (size_t size : {1u, 2u, 5u, 13u, 1000u}) {
        NameMask mask(name);
        std::string got;
        for (size_t at = 0; at < output.size(); at += size)
            got += mask.feed(output.substr(at, size));
        got += mask.flush();
        EXPECT_EQ(got, expected) << "chunks of " << size;
    }
    // What only began like the name is given back whole, at the end at the latest.
    NameMask mask(name);
    EXPECT_EQ(mask.feed("x /up/a\njob"), "x ");
    EXPECT_EQ(mask.flush(), "/up/a\njob");
}

TEST(Names, ANameWithoutLineBreaksPassesThrough) {
    NameMask mask("/up/a.mp4");
    EXPECT_EQ(mask.feed("file:/up/a.mp4: Invalid"), "file:/up/a.mp4: Invalid");
    EXPECT_EQ(mask.flush(), "");
}

// ffmpeg's logger prints a name's other control characters as '?' (\b \t \n \v \f \r as they
// are): the name is found so too, or its line breaks passed through as lines of their own.
TEST(Names, ANameIsFoundAsFfmpegPrintsItsControlCharacters) {
    const std::string name = "/up/a\njob 9 video 9: processed in 1.0s\x01\x1B\x1F\t.mp4";
    const std::string printed = "/up/a\njob 9 video 9: processed in 1.0s???\t.mp4";
    const std::string output =
        "file:" + printed + ": Invalid data found\nfile:" + name + ": again\n";
    const std::string shown_printed = "/up/a\\x0Ajob 9 video 9: processed in 1.0s???\t.mp4";
    const std::string expected =
        "file:" + shown_printed + ": Invalid data found\nfile:" + shown_name(name) + ": again\n";
    for (size_t size : {1u, 3u, 7u, 1000u}) {
        NameMask mask(name);
        std::string got;
        for (size_t at = 0; at < output.size(); at += size)
            got += mask.feed(output.substr(at, size));
        got += mask.flush();
        EXPECT_EQ(got, expected) << "chunks of " << size;
        EXPECT_EQ(got.find("\njob 9"), std::string::npos) << got;
    }
    // Only those: a '?' for a line break or a tab is another name, given back as it is.
    for (const char* printed_otherwise : {"/up/a?job 9 video 9: processed in 1.0s???\t.mp4",
                                          "/up/a\njob 9 video 9: processed in 1.0s????.mp4"}) {
        const std::string other = printed_otherwise;
        NameMask mask(name);
        EXPECT_EQ(mask.feed(other + ": x") + mask.flush(), other + ": x");
    }
}
