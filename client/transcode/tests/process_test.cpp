#include <signal.h>

#include <chrono>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>

#include "kill_switch.hpp"
#include "process.hpp"

using transcode::ChildProcess;
using transcode::Pump;

TEST(Process, CollectsStdoutAndStderrAndExitCode) {
    ChildProcess p({"sh", "-c", "echo out; echo err >&2; exit 3"});
    std::string out, err;
    Pump pump;
    pump.on_stdout = [&](std::string_view s) { out.append(s); };
    pump.on_stderr = [&](std::string_view s) { err.append(s); };
    auto st = p.run(pump);
    EXPECT_EQ(out, "out\n");
    EXPECT_EQ(err, "err\n");
    EXPECT_TRUE(st.exited);
    EXPECT_EQ(st.code, 3);
    EXPECT_FALSE(st.success());
}

TEST(Process, ArgumentsAreNotInterpretedByAShell) {
    ChildProcess p({"echo", "$HOME; rm -rf /", "*"});
    std::string out;
    Pump pump;
    pump.on_stdout = [&](std::string_view s) { out.append(s); };
    EXPECT_TRUE(p.run(pump).success());
    EXPECT_EQ(out, "$HOME; rm -rf / *\n");
}

TEST(Process, MissingProgramIsASpawnError) {
    EXPECT_THROW(ChildProcess({"no-such-program-hopper"}), transcode::SpawnError);
}

TEST(Process, KillFromAnotherThreadStopsItPromptly) {
    ChildProcess p({"sleep", "30"});
    auto start = std::chrono::steady_clock::now();
    std::thread killer([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        p.kill();
    });
    auto st = p.run(Pump{});
    killer.join();
    EXPECT_FALSE(st.exited);
    EXPECT_EQ(st.signal, SIGKILL);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    p.kill();  // after the exit: harmless
}

TEST(Process, TickRunsWhileTheChildIsSilent) {
    ChildProcess p({"sleep", "0.5"});
    int ticks = 0;
    Pump pump;
    pump.tick = std::chrono::milliseconds(50);
    pump.on_tick = [&] { ++ticks; };
    EXPECT_TRUE(p.run(pump).success());
    EXPECT_GE(ticks, 3);
}

namespace {
// No longer running: gone, or a zombie waiting for whoever inherited it to reap it.
bool not_running(pid_t pid) {
    if (::kill(pid, 0) != 0) return true;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string pid_field, comm, state;
    stat >> pid_field >> comm >> state;
    return state == "Z" || state == "X";
}
}  // namespace

TEST(Process, DestructorKillsTheWholeProcessGroup) {
    pid_t grandchild = 0;
    {
        // The shell starts a background sleep in its group and reports its pid.
        ChildProcess p({"sh", "-c", "sleep 30 & echo $!; wait"});
        std::string out;
        Pump pump;
        pump.on_stdout = [&](std::string_view s) { out.append(s); };
        pump.tick = std::chrono::milliseconds(20);
        pump.on_tick = [&] {
            if (!out.empty() && out.back() == '\n' && grandchild == 0) {
                grandchild = std::stoi(out);
                p.kill();
            }
        };
        p.run(pump);
    }
    ASSERT_GT(grandchild, 0);
    bool gone = false;
    for (int i = 0; i < 50 && !gone; ++i) {
        gone = not_running(grandchild);
        if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(gone);
}

TEST(Process, KillSwitchFiredBeforeArmingKillsAtOnce) {
    transcode::KillSwitch ks;
    ks.fire();
    ChildProcess p({"sleep", "30"});
    transcode::KillSwitch::Armed armed(ks, p);
    auto st = p.run(Pump{});
    EXPECT_FALSE(st.exited);
}
