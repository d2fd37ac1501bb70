// Output that appears complete or not at all: encode into a hidden staging directory next to the
// target, then move it into place with one rename.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace transcode {

class StagingDir {
  public:
    // Creates `<output_dir>/.<name>.partial-XXXXXX` (same file system as the target, so the final
    // rename is atomic).
    StagingDir(const std::filesystem::path& output_dir, const std::string& name);
    // Removes the staging directory unless it was published.
    ~StagingDir();
    StagingDir(const StagingDir&) = delete;
    StagingDir& operator=(const StagingDir&) = delete;

    const std::filesystem::path& path() const { return dir_; }
    const std::filesystem::path& target() const { return target_; }

    // Moves the staged files to `<output_dir>/<name>`. An earlier output there is swapped out in
    // the same atomic step and then deleted, so readers see either the old or the new stream.
    void publish();

    // Deletes staging directories for `name` left by a worker that died mid-encode.
    static void sweep_stale(const std::filesystem::path& output_dir, const std::string& name);

    struct Found {
        std::string name;  // whose stream it stages
        std::filesystem::path path;
    };
    // Every staging directory in `output_dir`, of any name, whether its encode runs or not.
    static std::vector<Found> list(const std::filesystem::path& output_dir);

  private:
    std::filesystem::path dir_;
    std::filesystem::path target_;
    bool published_ = false;
};

}  // namespace transcode
