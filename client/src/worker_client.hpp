// The connections of the worker runtimes (Worker, TakeWorker and their heartbeat).
#pragma once

#include <memory>
#include <string>

#include "hopper/client.hpp"

namespace hopper::internal {

// A client whose session has idle_session_timeout off, now and after every reconnect: a worker's
// connections sit idle by design (the fetch connection while its waiting pull waits, a handler's
// while its job works outside the database), and the server ending one would forfeit the leases
// it holds. Not behind a connection pooler (Connection::pooled): its server sessions are the
// pooler's, and hold no lease of the worker's. Throws ConnectionError when the server cannot be
// reached.
std::unique_ptr<Client> worker_client(const std::string& conninfo);

// Whether `conn` is still open: false once the server has closed it. A server that restarts (or
// an operator's pg_terminate_backend) ends idle sessions, and their connections look open until
// they are next used; this notices it without a round trip and without waiting, by reading what
// the server sent (its farewell, then the closed socket), and leaves anything else it read, a
// notification say, for the connection's next reader. A connection lost without word from the
// server (a network gone quiet) still looks open.
bool still_open(Connection& conn);

// Whether the session's statement_timeout ends a wait in the server this long (with a second
// for the statement's work around it). A waiting pull or take ended by SQLSTATE 57014 met either
// that or someone's pg_cancel_backend; only the timeout says the role cannot wait, and an
// operator's cancel must not turn a worker to LISTEN and polling for good. false also when the
// setting cannot be read: the caller then retries the wait as after any other error.
bool statement_timeout_cuts(Client& client, Duration wait);

}  // namespace hopper::internal
