// ChildProcess: fork + execv with pipes, a process group of its own and a parent-death signal.
#include "process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "text_tail.hpp"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

namespace transcode {

Fd& Fd::operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
}

int Fd::release() noexcept {
    int fd = fd_;
    fd_ = -1;
    return fd;
}

void Fd::reset(int fd) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
}

std::string ExitStatus::describe() const {
    if (exited) return fmt::format("exited with status {}", code);
    return fmt::format("killed by signal {} ({})", signal, ::strsignal(signal));
}

std::string find_program(const std::string& name) {
    if (name.empty()) return {};
    if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
    const char* path = std::getenv("PATH");
    std::string_view dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
    while (true) {
        auto colon = dirs.find(':');
        std::string dir(dirs.substr(0, colon));
        std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
        if (colon == std::string_view::npos) return {};
        dirs.remove_prefix(colon + 1);
    }
}

std::string program_problem(const std::string& program, std::chrono::milliseconds limit) {
    std::string path = find_program(program);
    if (path.empty())
        return program.find('/') != std::string::npos ? "not found, or not executable"
                                                      : "not found in PATH";
    struct stat st {};
    // access(X_OK) also holds for a directory, which execv then refuses.
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "not an executable file";
    struct TimedOut {};
    TextTail err(4);
    try {
        ChildProcess child({path, "-version"});
        Pump pump;
        pump.on_stdout = [](std::string_view) {};
        pump.on_stderr = [&](std::string_view s) { err.append(s); };
        const auto deadline = std::chrono::steady_clock::now() + limit;
        pump.on_tick = [&] {
            if (std::chrono::steady_clock::now() >= deadline) throw TimedOut{};
        };
        pump.tick = std::chrono::milliseconds(50);
        ExitStatus status = child.run(pump);
        if (status.success()) return {};
        std::string why = err.text();
        return fmt::format("\"{} -version\" {}{}{}", program, status.describe(),
                           why.empty() ? "" : ": ", why);
    } catch (const TimedOut&) {
        return fmt::format("\"{} -version\" did not finish within {:g} s", program,
                           std::chrono::duration<double>(limit).count());
    } catch (const SpawnError& e) {
        return e.what();
    }
}

namespace {

struct PipePair {
    Fd read;
    Fd write;
};

PipePair make_pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
        throw SpawnError(fmt::format("pipe: {}", std::strerror(errno)));
    return {Fd(fds[0]), Fd(fds[1])};
}

// Runs in the forked child of a multi-threaded parent: async-signal-safe calls only.
[[noreturn]] void exec_child(const char* program, char* const* argv, int in, int out, int err,
                             int report, pid_t parent) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The parent may have died before prctl took effect; then nobody would ever kill us.
    if (::getppid() != parent) ::_exit(127);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    // The worker's other descriptors (database sockets of other threads) must not leak into the
    // encoder; the report pipe stays open until exec succeeds, which is how the parent learns of
    // it.
    if (::syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
        for (int fd = 3; fd < 4096; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    // Blocked or ignored signals survive exec; the encoder must die on SIGTERM/SIGPIPE as usual.
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT}) ::sigaction(sig, &dfl, nullptr);
    ::execv(program, argv);
    int e = errno;
    ssize_t ignored = ::write(report, &e, sizeof e);
    (void)ignored;
    ::_exit(127);
}

void set_nonblocking(int fd) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

}  // namespace

ChildProcess::ChildProcess(const std::vector<std::string>& argv) {
    if (argv.empty()) throw SpawnError("empty command line");
    std::string program = find_program(argv[0]);
    if (program.empty()) throw SpawnError(fmt::format("{}: program not found in PATH", argv[0]));

    // Everything the child needs is prepared before fork: it must not allocate.
    std::vector<std::string> args = argv;
    std::vector<char*> ptrs;
    for (auto& a : args) ptrs.push_back(a.data());
    ptrs.push_back(nullptr);

    Fd devnull(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    if (!devnull) throw SpawnError(fmt::format("/dev/null: {}", std::strerror(errno)));
    PipePair out = make_pipe();
    PipePair err = make_pipe();
    PipePair report = make_pipe();
    pid_t parent = ::getpid();

    pid_ = ::fork();
    if (pid_ < 0) throw SpawnError(fmt::format("fork: {}", std::strerror(errno)));
    if (pid_ == 0)
        exec_child(program.c_str(), ptrs.data(), devnull.get(), out.write.get(), err.write.get(),
                   report.write.get(), parent);

    // Also from this side, so a kill() right after the constructor already reaches the group.
    ::setpgid(pid_, pid_);
    out.write.reset();
    err.write.reset();
    report.write.reset();
    int child_errno = 0;
    ssize_t n;
    do {
        n = ::read(report.read.get(), &child_errno, sizeof child_errno);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof child_errno)) {
        wait();
        throw SpawnError(fmt::format("{}: {}", program, std::strerror(child_errno)));
    }
    out_ = std::move(out.read);
    err_ = std::move(err.read);
    set_nonblocking(out_.get());
    set_nonblocking(err_.get());
}

ChildProcess::~ChildProcess() {
    bool running;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        running = !reaped_;
    }
    if (running) {
        kill();
        wait();
    }
}

void ChildProcess::kill() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!reaped_ && pid_ > 0) ::kill(-pid_, SIGKILL);
}

ExitStatus ChildProcess::run(const Pump& pump) {
    char buf[8192];
    auto drain = [&](Fd& fd, const std::function<void(std::string_view)>& sink) {
        while (fd) {
            ssize_t n = ::read(fd.get(), buf, sizeof buf);
            if (n > 0) {
                if (sink) sink(std::string_view(buf, static_cast<size_t>(n)));
            } else if (n == 0) {
                fd.reset();
            } else if (errno == EINTR) {
                continue;
            } else {
                if (errno != EAGAIN && errno != EWOULDBLOCK) fd.reset();
                return;
            }
        }
    };
    while (out_ || err_) {
        pollfd fds[2];
        nfds_t count = 0;
        if (out_) fds[count++] = {out_.get(), POLLIN, 0};
        if (err_) fds[count++] = {err_.get(), POLLIN, 0};
        int r = ::poll(fds, count, static_cast<int>(pump.tick.count()));
        if (r < 0 && errno != EINTR) break;
        drain(out_, pump.on_stdout);
        drain(err_, pump.on_stderr);
        if (pump.on_tick) pump.on_tick();
    }
    return wait();
}

ExitStatus ChildProcess::wait() {
    // Wait without reaping first: until the zombie is reaped its pid stays ours, so a concurrent
    // kill() can never hit a stranger that reused it.
    siginfo_t info{};
    while (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT) != 0 &&
           errno == EINTR) {
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (reaped_) return status_;
    // The leader has exited but is not reaped, so the group id is still ours: anything the child
    // left behind in its group goes with it.
    ::kill(-pid_, SIGKILL);
    int raw = 0;
    while (::waitpid(pid_, &raw, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    if (WIFEXITED(raw)) {
        status_ = {true, WEXITSTATUS(raw), 0};
    } else if (WIFSIGNALED(raw)) {
        status_ = {false, 0, WTERMSIG(raw)};
    }
    return status_;
}

}  // namespace transcode
