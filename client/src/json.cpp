// JSON string quoting (RFC 8259: quote, backslash and control characters escaped).
#include <fmt/format.h>

#include "encoded_chars.hpp"
#include "hopper/json.hpp"

namespace hopper::json {

namespace {
// A byte below 0x80 that is a character of its own.
void append_escaped(std::string& out, char c) {
    switch (c) {
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\r':
            out += "\\r";
            break;
        case '\t':
            out += "\\t";
            break;
        default:
            if (static_cast<unsigned char>(c) < 0x20)
                out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
            else
                out += c;
    }
}
}  // namespace

std::string quote(std::string_view s) {
    std::string out;
    out.reserve(s.size() + 2);
    out += '"';
    for (char c : s) append_escaped(out, c);
    out += '"';
    return out;
}

std::string quote(std::string_view s, int encoding) {
    std::string out;
    out.reserve(s.size() + 2);
    out += '"';
    for (size_t i = 0; i < s.size();) {
        const size_t n = internal::encoded_char_length(s, i, encoding);
        if (n == 1)
            append_escaped(out, s[i]);
        else
            out.append(s, i, n);
        i += n;
    }
    out += '"';
    return out;
}

}  // namespace hopper::json
