// A child process started from an argument vector (never through a shell), its stdout and stderr
// read without blocking, and a guarantee that it never outlives its owner.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace transcode {

// An owned file descriptor, closed on destruction.
class Fd {
  public:
    Fd() = default;
    explicit Fd(int fd) : fd_(fd) {}
    Fd(Fd&& other) noexcept : fd_(other.release()) {}
    Fd& operator=(Fd&& other) noexcept;
    Fd(const Fd&) = delete;
    Fd& operator=(const Fd&) = delete;
    ~Fd() { reset(); }

    int get() const { return fd_; }
    int release() noexcept;
    void reset(int fd = -1) noexcept;
    explicit operator bool() const { return fd_ >= 0; }

  private:
    int fd_ = -1;
};

// The program could not be started at all (not found, not executable).
class SpawnError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

struct ExitStatus {
    bool exited = false;  // false: killed by `signal`
    int code = 0;
    int signal = 0;
    bool success() const { return exited && code == 0; }
    std::string describe() const;
};

// What to do with the child's output while it runs. Callbacks run on the calling thread.
struct Pump {
    std::function<void(std::string_view)> on_stdout;
    std::function<void(std::string_view)> on_stderr;
    // Called at least every `tick` while the child runs, e.g. to check a deadline or a stop flag.
    std::function<void()> on_tick;
    std::chrono::milliseconds tick{200};
};

// Looks `name` up in PATH like a shell would (a name with a slash is taken as is); empty if absent.
std::string find_program(const std::string& name);

// Why `program -version` cannot be run to a successful exit within `limit`: not found, not an
// executable file, does not start, fails or hangs. Empty when it can. A worker checks its encoder
// and prober once at start-up, as otherwise every job it took would fail until dead.
std::string program_problem(const std::string& program, std::chrono::milliseconds limit);

class ChildProcess {
  public:
    // Starts argv[0] with stdin from /dev/null and stdout/stderr piped to us. The child leads a
    // process group of its own, so kill() reaches anything it starts, and gets SIGKILL if the
    // thread that started it dies, so a crashed worker never leaves an encoder running.
    explicit ChildProcess(const std::vector<std::string>& argv);
    // Kills and reaps a child that is still running: no zombie, no orphan.
    ~ChildProcess();
    ChildProcess(const ChildProcess&) = delete;
    ChildProcess& operator=(const ChildProcess&) = delete;

    pid_t pid() const { return pid_; }

    // Reads stdout and stderr until both close, then waits for the exit.
    ExitStatus run(const Pump& pump);

    // SIGKILL to the whole process group. Safe from any thread, also after the child exited: the
    // child is only reaped under the same lock, so its pid cannot have been reused.
    void kill() noexcept;

  private:
    ExitStatus wait();

    pid_t pid_ = -1;
    Fd out_;
    Fd err_;
    std::mutex mutex_;
    bool reaped_ = false;
    ExitStatus status_;
};

}  // namespace transcode
