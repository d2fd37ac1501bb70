// Small JSON text helpers for building payloads and output without a JSON library.
#pragma once

#include <string>
#include <string_view>

namespace hopper::json {

// `s` as a JSON string literal, quotes included. Its bytes are kept as they are: JSON sent to the
// server is text in the session's client_encoding, which the server converts (a Latin-1 session's
// file name reaches the database as the same name); output that must be UTF-8 asks the server
// for UTF-8 (the CLI's --json sets client_encoding).
//
// This form escapes byte by byte, which is right for UTF-8 and every encoding whose bytes below
// 0x80 are always ASCII characters (LATIN1, EUC_JP, every encoding a database can have). Text in
// a session's client_encoding, which may be SJIS, BIG5, GBK, GB18030, UHC or JOHAB, whose
// characters can hold the byte 0x5C after their first, takes the second form:
//   hopper::json::quote(path, client.connection().client_encoding())
std::string quote(std::string_view s);
// `s` read in `encoding` (libpq's numbering: Connection::client_encoding(), PQclientEncoding):
// only a character of one byte is escaped, a backslash or quote inside a wider one kept as it is.
std::string quote(std::string_view s, int encoding);

}  // namespace hopper::json
