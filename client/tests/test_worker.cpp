// A worker process for the multi-process tests: handles every job of a queue by recording it in
// the `handled` table, until SIGTERM (graceful shutdown through the runtime's signal handling).
//   hopper_test_worker CONNINFO QUEUE CONCURRENCY
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <thread>

#include "hopper/worker.hpp"

int main(int argc, char** argv) {
    if (argc != 4) {
        std::cerr << "usage: hopper_test_worker CONNINFO QUEUE CONCURRENCY\n";
        return 2;
    }
    std::string queue = argv[2];
    hopper::WorkerOptions o;
    // The tests find this process's connections by application_name.
    o.conninfo = std::string(argv[1]) + " application_name=hopper_test_worker";
    o.queue = queue;
    o.concurrency = std::atoi(argv[3]);
    o.max_batch = 8;
    o.poll_interval = std::chrono::milliseconds(500);
    hopper::Worker w(o);
    w.on_any([&](hopper::JobContext& job) {
        job.client().exec("INSERT INTO handled VALUES ($1, $2, $3, $4)", job.id(), job.attempt(),
                          static_cast<int>(::getpid()), queue);
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    });
    w.run();
    return 0;
}
