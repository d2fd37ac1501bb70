#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "publish.hpp"

namespace fs = std::filesystem;
using transcode::StagingDir;

namespace {

class Publish : public ::testing::Test {
  protected:
    void SetUp() override {
        root_ = fs::temp_directory_path() /
                ("hopper-publish-test-" + std::to_string(::getpid()) + "-" +
                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(root_);
    }
    void TearDown() override { fs::remove_all(root_); }
    static void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }
    static std::string read(const fs::path& p) {
        std::ifstream in(p);
        return std::string(std::istreambuf_iterator<char>(in), {});
    }
    size_t entries() const {
        return static_cast<size_t>(std::distance(fs::directory_iterator(root_), {}));
    }
    fs::path root_;
};

}  // namespace

TEST_F(Publish, NothingVisibleUntilPublished) {
    {
        StagingDir s(root_, "v1");
        EXPECT_EQ(s.path().parent_path(), root_);
        EXPECT_EQ(s.path().filename().string().rfind(".v1.partial-", 0), 0u);
        write(s.path() / "index.m3u8", "x");
        EXPECT_FALSE(fs::exists(root_ / "v1"));
    }
    // Abandoned: the staging directory is gone and nothing was published.
    EXPECT_EQ(entries(), 0u);
}

TEST_F(Publish, PublishMovesIntoPlace) {
    StagingDir s(root_, "v1");
    write(s.path() / "index.m3u8", "new");
    s.publish();
    EXPECT_EQ(read(root_ / "v1" / "index.m3u8"), "new");
    EXPECT_FALSE(fs::exists(s.path()));
}

TEST_F(Publish, RepublishReplacesTheOldOutputWhole) {
    {
        StagingDir s(root_, "v1");
        write(s.path() / "old-only.ts", "old");
        s.publish();
    }
    StagingDir s(root_, "v1");
    write(s.path() / "index.m3u8", "new");
    s.publish();
    EXPECT_EQ(read(root_ / "v1" / "index.m3u8"), "new");
    EXPECT_FALSE(fs::exists(root_ / "v1" / "old-only.ts"));
    EXPECT_EQ(entries(), 1u);
}

TEST_F(Publish, SweepRemovesOnlyThatVideosLeftovers) {
    fs::create_directories(root_ / ".v1.partial-abc123");
    fs::create_directories(root_ / ".v10.partial-abc123");
    fs::create_directories(root_ / "v1");
    StagingDir::sweep_stale(root_, "v1");
    EXPECT_FALSE(fs::exists(root_ / ".v1.partial-abc123"));
    EXPECT_TRUE(fs::exists(root_ / ".v10.partial-abc123"));
    EXPECT_TRUE(fs::exists(root_ / "v1"));
}

TEST_F(Publish, ListFindsEveryVideosStagingDirectories) {
    fs::create_directories(root_ / ".v1.partial-abc123");
    fs::create_directories(root_ / ".v1.partial-def456");
    fs::create_directories(root_ / ".a.b.partial-abc123");  // ids may hold dots
    fs::create_directories(root_ / "v1");
    fs::create_directories(root_ / ".partial-abc123");    // no name
    fs::create_directories(root_ / ".v2.partial-abc");    // not mkdtemp's
    fs::create_directories(root_ / "v3.partial-abc123");  // not hidden
    std::vector<std::string> names;
    for (const auto& f : StagingDir::list(root_)) {
        EXPECT_EQ(f.path.parent_path(), root_);
        names.push_back(f.name);
    }
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"a.b", "v1", "v1"}));
    EXPECT_TRUE(StagingDir::list(root_ / "missing").empty());
}

TEST_F(Publish, ListNamesWhatAStagingDirectoryStages) {
    StagingDir s(root_, "clip-7.x");
    auto found = StagingDir::list(root_);
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].name, "clip-7.x");
    EXPECT_EQ(found[0].path, s.path());
}
