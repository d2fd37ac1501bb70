#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <unistd.h>

#include "paths.hpp"

namespace fs = std::filesystem;
using transcode::absolute_path;

TEST(AbsolutePath, DropsOnlyWhatTheKernelIgnores) {
    EXPECT_EQ(absolute_path("/srv/up/clip.mp4"), "/srv/up/clip.mp4");
    EXPECT_EQ(absolute_path("/srv/./up//clip.mp4"), "/srv/up/clip.mp4");
    EXPECT_EQ(absolute_path("//srv/up/./"), "/srv/up/");
    EXPECT_EQ(absolute_path("/srv/up/."), "/srv/up/");
    EXPECT_EQ(absolute_path("/srv/hls/"), "/srv/hls/");
    EXPECT_EQ(absolute_path("/"), "/");
    EXPECT_EQ(absolute_path("/."), "/");
    // ".." is left to the kernel, which may reach it through a symbolic link.
    EXPECT_EQ(absolute_path("/srv/up/../clip.mp4"), "/srv/up/../clip.mp4");
    EXPECT_EQ(absolute_path("/srv/up/.."), "/srv/up/..");
}

TEST(AbsolutePath, RelativeFromTheWorkingDirectory) {
    const std::string cwd = fs::current_path().string();
    EXPECT_EQ(absolute_path("clip.mp4"), cwd + "/clip.mp4");
    EXPECT_EQ(absolute_path("./clip.mp4"), cwd + "/clip.mp4");
    EXPECT_EQ(absolute_path("a/../clip.mp4"), cwd + "/a/../clip.mp4");
    EXPECT_EQ(absolute_path("."), cwd + "/");
}

TEST(AbsolutePath, NamesTheFileTheKernelFindsThroughALink) {
    const fs::path root =
        fs::temp_directory_path() / ("hopper-paths-test-" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root / "store" / "up");
    fs::create_directories(root / "lk");
    fs::create_directory_symlink(root / "store" / "up", root / "lk" / "up");
    std::ofstream(root / "store" / "clip.mp4") << "the upload";
    const std::string given = (root / "lk" / "up" / ".." / "clip.mp4").string();
    ASSERT_TRUE(fs::exists(given));
    const std::string p = absolute_path(given);
    EXPECT_TRUE(fs::exists(p)) << p;
    EXPECT_TRUE(fs::equivalent(p, root / "store" / "clip.mp4")) << p;
    EXPECT_FALSE(fs::exists(root / "lk" / "clip.mp4"));
    fs::remove_all(root);
}
