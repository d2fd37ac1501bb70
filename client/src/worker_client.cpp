#include "worker_client.hpp"

#include <poll.h>

#include <chrono>

#include <libpq-fe.h>

namespace hopper::internal {

std::unique_ptr<Client> worker_client(const std::string& conninfo) {
    auto client = std::make_unique<Client>(conninfo);
    // Not behind a pooler: the server sessions are the pooler's to keep or close, and in
    // transaction mode the setting would stay on whichever session ran it, for its next clients.
    if (!client->connection().pooled())
        client->connection().on_connect("SET idle_session_timeout = 0");
    return client;
}

bool still_open(Connection& conn) {
    if (!conn.ok()) return false;
    pg_conn* raw = conn.raw();
    // libpq's socket does not block: each PQconsumeInput reads what is there and no more. The
    // server's last words and its closing of the socket may come in two reads, and a busy
    // listener's notifications in any number: a few rounds see the first through, and the
    // connection is taken for open if data still comes.
    for (int round = 0; round < 4; ++round) {
        pollfd fd{PQsocket(raw), POLLIN, 0};
        if (::poll(&fd, 1, 0) <= 0) break;  // nothing to read (or a signal): as it was
        if (PQconsumeInput(raw) == 0) break;
    }
    return PQstatus(raw) == CONNECTION_OK;
}

bool statement_timeout_cuts(Client& client, Duration wait) {
    try {
        std::chrono::milliseconds timeout(
            client
                .exec("SELECT setting::int8 FROM pg_catalog.pg_settings WHERE name = "
                      "'statement_timeout'")
                .int64(0, 0));
        return timeout.count() > 0 && timeout <= wait + std::chrono::seconds(1);
    } catch (const std::exception&) {
        return false;
    }
}

}  // namespace hopper::internal
