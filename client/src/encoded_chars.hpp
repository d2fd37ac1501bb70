// Walking text character by character in a session's client_encoding, for the escapes of array
// literals and JSON strings. In SJIS, BIG5, GBK, GB18030, UHC and JOHAB a later byte of a
// character can be 0x5C, the backslash (Shift-JIS's 表 is 0x95 0x5C): escaped byte by byte, it
// became a `\\` inside the character, and the server read the text as another.
#pragma once

#include <cstddef>
#include <string_view>

#include <libpq-fe.h>

namespace hopper::internal {

// The length of the character at `s[i]` in `encoding` (libpq's numbering, PQclientEncoding), at
// least 1 and within `s`. A character whose later bytes hold a control character or a quote is
// no valid one (none of these encodings has such a byte after the first): its first byte is taken
// alone, so that what follows is escaped as ever and cannot end the quoted text early; the server
// refuses the byte as its encoding's invalid sequence.
inline size_t encoded_char_length(std::string_view s, size_t i, int encoding) {
    // PQmblen reads the first byte, and for GB18030 the second: a lone last byte is one byte.
    if (i + 1 >= s.size() || static_cast<unsigned char>(s[i]) < 0x80) return 1;
    const int n = PQmblen(s.data() + i, encoding);
    if (n <= 1) return 1;
    const size_t len = static_cast<size_t>(n);
    if (len > s.size() - i) return 1;
    for (size_t k = 1; k < len; ++k) {
        const auto b = static_cast<unsigned char>(s[i + k]);
        if (b < 0x20 || b == '"') return 1;
    }
    return len;
}

}  // namespace hopper::internal
