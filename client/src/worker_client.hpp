// The connections of the worker runtimes (Worker, TakeWorker and their heartbeat).
#pragma once

#include <memory>
#include <string>

#include "hopper/client.hpp"

namespace hopper::internal {

// A client whose session has idle_session_timeout off, now and after every reconnect: a worker's
// connections sit idle by design (the fetch connection while its waiting pull waits, a handler's
// while its job works outside the database), and the server ending one would forfeit the leases
// it holds. Throws ConnectionError when the server cannot be reached.
std::unique_ptr<Client> worker_client(const std::string& conninfo);

}  // namespace hopper::internal
