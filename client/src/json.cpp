// JSON string quoting (RFC 8259: quote, backslash and control characters escaped, and the text
// valid UTF-8).
#include <fmt/format.h>

#include "hopper/json.hpp"
#include "utf8_chars.hpp"

namespace hopper::json {

std::string quote(std::string_view s) {
    std::string out;
    out.reserve(s.size() + 2);
    out += '"';
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (static_cast<unsigned char>(c) >= 0x80) {
            // JSON text is UTF-8 (RFC 8259): a byte that starts no valid character (Latin-1
            // text, a file name's stray byte) becomes U+FFFD rather than invalid JSON.
            size_t n = internal::utf8_char_length(s.substr(i));
            out += n ? s.substr(i, n) : std::string_view("\xEF\xBF\xBD");
            if (n) i += n - 1;
            continue;
        }
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
    out += '"';
    return out;
}

}  // namespace hopper::json
