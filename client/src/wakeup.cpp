// Self-pipe wake-ups; see wakeup.hpp.
#include "wakeup.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <system_error>

namespace hopper::internal {

Wakeup::Wakeup() {
    if (::pipe2(fds_, O_NONBLOCK | O_CLOEXEC) != 0)
        throw std::system_error(errno, std::generic_category(), "pipe2");
}

Wakeup::~Wakeup() {
    ::close(fds_[0]);
    ::close(fds_[1]);
}

void Wakeup::notify() noexcept {
    char c = 1;
    // A full pipe already means "wake up": the result does not matter.
    [[maybe_unused]] auto n = ::write(fds_[1], &c, 1);
}

bool Wakeup::wait(std::chrono::milliseconds timeout) const {
    pollfd p{fds_[0], POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(timeout.count())) > 0;
}

void Wakeup::drain() noexcept {
    char buf[64];
    while (::read(fds_[0], buf, sizeof buf) > 0) {
    }
}

}  // namespace hopper::internal
