// The README's client examples (block2.inc .. block5.inc, extracted from README.md as they are),
// each in a function that supplies what its text leaves to the reader: a path, a connection, the
// TakeOptions of the example before, render_and_store. readme_examples.sh runs them one by one:
//   readme_client_examples push|take|fail_taken|take_worker
#include <hopper/hopper.hpp>

#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>

namespace {

// Fails for an invoice whose payload says "bad".
void render_and_store(hopper::Client& db, const hopper::Job& job) {
    if (job.payload.find("bad") != std::string::npos) throw std::runtime_error("cannot render");
    db.exec("UPDATE invoices SET sent = true WHERE id = ($1::jsonb->>'invoice')::int", job.payload);
}

void push_and_wait(const std::string& path) {
#include "block2.inc"
    std::cout << "job " << job << " "
              << (done ? std::string(hopper::to_string(done->state)) : "not finished") << "\n";
}

void take_in_a_transaction(hopper::Client& db) {
#include "block3.inc"
}

void fail_taken(hopper::Client& db) {
    hopper::TakeOptions take;
    take.n = 10;
#include "block4.inc"
}

void take_worker() {
#include "block5.inc"
}

}  // namespace

int main(int argc, char** argv) {
    const std::string what = argc > 1 ? argv[1] : "";
    if (what == "push") {
        // Something to finish the job the example waits for.
        hopper::WorkerOptions o;
        o.queue = "transcode";
        o.handle_signals = false;
        hopper::Worker w(o);
        w.on_any([](hopper::JobContext&) {});
        std::thread t([&] { w.run(); });
        push_and_wait("/videos/a.mp4");
        w.stop();
        t.join();
    } else if (what == "take") {
        hopper::Client db;
        take_in_a_transaction(db);
    } else if (what == "fail_taken") {
        hopper::Client db;
        fail_taken(db);
    } else if (what == "take_worker") {
        take_worker();
        std::cout << "returned\n";
    } else {
        std::cerr << "usage: readme_client_examples push|take|fail_taken|take_worker\n";
        return 2;
    }
    return 0;
}
