// A worker process for the multi-process tests, stopped by SIGTERM or SIGINT (a graceful shutdown
// through the runtime's own signal handling).
//   hopper_test_worker CONNINFO QUEUE CONCURRENCY [record|block] [SHUTDOWN_TIMEOUT_MS]
// record: handle every job by recording it in the `handled` table.
// block:  hold every job until told to stop (to test what shutdown does with running jobs).
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <thread>

#include "hopper/worker.hpp"

int main(int argc, char** argv) {
    if (argc < 4 || argc > 6) {
        std::cerr << "usage: hopper_test_worker CONNINFO QUEUE CONCURRENCY [record|block] "
                     "[SHUTDOWN_TIMEOUT_MS]\n";
        return 2;
    }
    std::string queue = argv[2];
    std::string mode = argc > 4 ? argv[4] : "record";
    hopper::WorkerOptions o;
    // The tests find this process's connections by application_name.
    o.conninfo = std::string(argv[1]) + " application_name=hopper_test_worker";
    o.queue = queue;
    o.concurrency = std::atoi(argv[3]);
    o.max_batch = 8;
    o.poll_interval = std::chrono::milliseconds(500);
    if (argc > 5) o.shutdown_timeout = std::chrono::milliseconds(std::atoi(argv[5]));
    hopper::Worker w(o);
    if (mode == "block") {
        w.on_any([](hopper::JobContext& job) { job.wait_for_stop(std::chrono::minutes(5)); });
    } else {
        w.on_any([&](hopper::JobContext& job) {
            job.client().exec("INSERT INTO handled VALUES ($1, $2, $3, $4)", job.id(),
                              job.attempt(), static_cast<int>(::getpid()), queue);
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        });
    }
    w.run();
    hopper::WorkerStats s = w.stats();
    std::cout << "released " << s.released << " completed " << s.completed << std::endl;
    return 0;
}
