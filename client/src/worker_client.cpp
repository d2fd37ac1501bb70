#include "worker_client.hpp"

#include <chrono>

namespace hopper::internal {

std::unique_ptr<Client> worker_client(const std::string& conninfo) {
    auto client = std::make_unique<Client>(conninfo);
    // Not behind a pooler: the server sessions are the pooler's to keep or close, and in
    // transaction mode the setting would stay on whichever session ran it, for its next clients.
    if (!client->connection().pooled())
        client->connection().on_connect("SET idle_session_timeout = 0");
    return client;
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
