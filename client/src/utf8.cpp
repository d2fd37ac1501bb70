// valid_utf8: a strict decoder (no overlong forms, surrogates or code points past U+10FFFF,
// as PostgreSQL checks).
#include "hopper/utf8.hpp"

#include "utf8_chars.hpp"

#include <libpq-fe.h>

#include "hopper/client.hpp"

#include <algorithm>

namespace hopper {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

bool continuation(unsigned char c) {
    return (c & 0xC0) == 0x80;
}

}  // namespace

namespace internal {

size_t utf8_char_length(std::string_view s) {
    auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
    unsigned char c = b(0);
    if (c >= 0x01 && c <= 0x7F) return 1;
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF;  // bounds of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;  // overlong
        if (c == 0xED) hi = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;  // overlong
        if (c == 0xF4) hi = 0x8F;  // past U+10FFFF
    } else {
        return 0;  // NUL, a stray continuation byte, C0, C1, F5..FF
    }
    if (s.size() < n || b(1) < lo || b(1) > hi) return 0;
    for (size_t i = 2; i < n; ++i)
        if (!continuation(b(i))) return 0;
    return n;
}

}  // namespace internal

std::string valid_utf8(std::string_view bytes, size_t max_bytes) {
    std::string out;
    out.reserve(std::min(bytes.size(), max_bytes));
    while (!bytes.empty()) {
        size_t n = internal::utf8_char_length(bytes);
        std::string_view piece = n ? bytes.substr(0, n) : kReplacement;
        if (out.size() + piece.size() > max_bytes) break;
        out += piece;
        bytes.remove_prefix(n ? n : 1);
    }
    return out;
}

bool utf8_session(Client& client) {
    const char* encoding = PQparameterStatus(client.connection().raw(), "client_encoding");
    return encoding && std::string_view(encoding) == "UTF8";
}

std::string escaped_utf8(std::string_view bytes) {
    static const char kHex[] = "0123456789ABCDEF";
    std::string out;
    while (!bytes.empty()) {
        if (bytes[0] == '\\') {
            out += "\\\\";  // or the text "\\xE9" would read as the byte it escapes
            bytes.remove_prefix(1);
            continue;
        }
        size_t n = internal::utf8_char_length(bytes);
        if (n) {
            out += bytes.substr(0, n);
            bytes.remove_prefix(n);
            continue;
        }
        auto c = static_cast<unsigned char>(bytes[0]);
        out += "\\x";
        out += kHex[c >> 4];
        out += kHex[c & 0xF];
        bytes.remove_prefix(1);
    }
    return out;
}

}  // namespace hopper
