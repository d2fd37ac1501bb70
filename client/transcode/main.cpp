// hopper-transcode: turns raw uploaded videos into HLS streams through the hopper job queue.
#include <iostream>

#include <hopper/error.hpp>

#include "cli_args.hpp"
#include "commands.hpp"
#include "terminal_text.hpp"

int main(int argc, char** argv) {
    using hopper::text::terminal_text;
    using transcode::Args;
    Args args;
    try {
        args = transcode::parse_args(argc, argv);
    } catch (const transcode::UsageError& e) {
        std::cerr << "hopper-transcode: " << terminal_text(e.what(), true) << "\n\n"
                  << transcode::usage();
        return 2;
    }
    try {
        switch (args.command) {
            case Args::Command::Help:
                std::cout << transcode::usage();
                return 0;
            case Args::Command::Submit:
                return transcode::submit_command(args);
            case Args::Command::Status:
                return transcode::status_command(args);
            case Args::Command::Run:
                return transcode::run_command(args);
        }
    } catch (const transcode::UsageError& e) {
        // Found only once the command starts (a --ffmpeg that cannot be run): still a usage error.
        std::cerr << "hopper-transcode: " << terminal_text(e.what(), true) << "\n";
        return 2;
    } catch (const std::exception& e) {
        std::cerr << "hopper-transcode: " << terminal_text(e.what(), true) << "\n";
        return 1;
    }
    return 1;
}
