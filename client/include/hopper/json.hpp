// Small JSON text helpers for building payloads and output without a JSON library.
#pragma once

#include <string>
#include <string_view>

namespace hopper::json {

// `s` as a JSON string literal, quotes included.
std::string quote(std::string_view s);

}  // namespace hopper::json
