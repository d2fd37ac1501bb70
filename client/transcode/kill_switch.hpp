// Lets a job's stop callback kill whichever child the job is running right now. A job's stop
// callback can fire at any moment, before, during or after a child runs, so it never holds the
// child itself.
#pragma once

#include <mutex>

#include "process.hpp"

namespace transcode {

class KillSwitch {
  public:
    // Once fired, every child armed afterwards is killed at once.
    void fire() {
        std::lock_guard<std::mutex> lock(mutex_);
        fired_ = true;
        if (child_) child_->kill();
    }

    // Registers `child` (non-owning) for the span of an Armed scope.
    class Armed {
      public:
        Armed(KillSwitch& ks, ChildProcess& child) : ks_(ks) {
            std::lock_guard<std::mutex> lock(ks_.mutex_);
            ks_.child_ = &child;
            if (ks_.fired_) child.kill();
        }
        ~Armed() {
            std::lock_guard<std::mutex> lock(ks_.mutex_);
            ks_.child_ = nullptr;
        }
        Armed(const Armed&) = delete;
        Armed& operator=(const Armed&) = delete;

      private:
        KillSwitch& ks_;
    };

  private:
    std::mutex mutex_;
    ChildProcess* child_ = nullptr;
    bool fired_ = false;
};

}  // namespace transcode
