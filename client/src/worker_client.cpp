#include "worker_client.hpp"

namespace hopper::internal {

std::unique_ptr<Client> worker_client(const std::string& conninfo) {
    auto client = std::make_unique<Client>(conninfo);
    client->connection().on_connect("SET idle_session_timeout = 0");
    return client;
}

}  // namespace hopper::internal
