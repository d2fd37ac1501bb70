// Small JSON text helpers for building payloads and output without a JSON library.
#pragma once

#include <string>
#include <string_view>

namespace hopper::json {

// `s` as a JSON string literal, quotes included. Its bytes are kept as they are: JSON sent to the
// server is text in the session's client_encoding, which the server converts (a Latin-1 session's
// file name reaches the database as the same name); output that must be UTF-8 asks the server
// for UTF-8 (the CLI's --json sets client_encoding).
std::string quote(std::string_view s);

}  // namespace hopper::json
