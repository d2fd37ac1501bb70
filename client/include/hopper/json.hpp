// Small JSON text helpers for building payloads and output without a JSON library.
#pragma once

#include <string>
#include <string_view>

namespace hopper::json {

// `s` as a JSON string literal, quotes included; each byte of `s` that is not part of a valid
// UTF-8 character becomes U+FFFD, as JSON text must be UTF-8.
std::string quote(std::string_view s);

}  // namespace hopper::json
