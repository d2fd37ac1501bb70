// Links against the installed library and uses it without a server.
#include <hopper/hopper.hpp>

#include <iostream>

int main() {
    hopper::WorkerOptions options;
    std::cout << hopper::to_string(hopper::parse_job_state("dead")) << ' '
              << hopper::json::quote("a\"b") << ' ' << options.queue << '\n';
    return 0;
}
