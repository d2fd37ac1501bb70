// The README's worker example (block1.inc, extracted from README.md as it is), with the one
// function it leaves to the reader. readme_examples.sh runs it.
#include <chrono>
#include <string>
#include <thread>

static void resize_tile(const std::string&, int) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

#include "block1.inc"
