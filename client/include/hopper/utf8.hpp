// Text made fit for the database: PostgreSQL refuses a string that is not valid UTF-8 or holds a
// NUL, and an error text refused (a handler's, another program's output) is a failure report lost.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hopper {

class Client;

// `bytes` as valid UTF-8 of at most `max_bytes` bytes: each invalid byte and each NUL becomes
// U+FFFD, and the text is cut before the first character that would not fit whole.
std::string valid_utf8(std::string_view bytes, size_t max_bytes = std::string::npos);

// `bytes` for a message that must name them exactly (a file name the database cannot hold): valid
// characters as they are but the backslash, doubled (\\), and each other byte (NUL included) as
// \xNN: the bytes "caf\xE9.mp4" read caf\xE9.mp4, the text caf\xE9.mp4 reads caf\\xE9.mp4.
std::string escaped_utf8(std::string_view bytes);

// Whether the connection's client_encoding is UTF8 (as for a UTF8 database unless
// PGCLIENTENCODING says otherwise): the text it sends must then be valid UTF-8, or the server
// refuses it as an "invalid byte sequence" naming no argument. A session of another encoding has
// the server convert from that one, and a Latin-1 file name, say, is fine. No round trip: the
// server reports the setting on connecting and on every change.
bool utf8_session(Client& client);

}  // namespace hopper
