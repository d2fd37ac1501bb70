// The strict UTF-8 decoding step that valid_utf8 and escaped_utf8 use.
#pragma once

#include <cstddef>
#include <string_view>

namespace hopper::internal {

// The length of the valid character at the start of `s` (no overlong form, surrogate or code
// point past U+10FFFF, as PostgreSQL checks), or 0 if it does not start with one (or with NUL).
size_t utf8_char_length(std::string_view s);

}  // namespace hopper::internal
