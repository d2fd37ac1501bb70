// Text made fit for the database: PostgreSQL refuses a string that is not valid UTF-8 or holds a
// NUL, and an error text refused (a handler's, another program's output) is a failure report lost.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hopper {

// `bytes` as valid UTF-8 of at most `max_bytes` bytes: each invalid byte and each NUL becomes
// U+FFFD, and the text is cut before the first character that would not fit whole.
std::string valid_utf8(std::string_view bytes, size_t max_bytes = std::string::npos);

// `bytes` for a message that must name them exactly (a file name the database cannot hold): valid
// characters as they are, each other byte (NUL included) as \xNN, e.g. "caf\xE9.mp4".
std::string escaped_utf8(std::string_view bytes);

}  // namespace hopper
