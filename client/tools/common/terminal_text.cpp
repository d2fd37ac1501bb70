// terminal_text; see terminal_text.hpp.
#include "terminal_text.hpp"

#include <fmt/format.h>

namespace hopper::text {

std::string terminal_text(std::string_view text, bool lines) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size(); ++i) {
        auto c = static_cast<unsigned char>(text[i]);
        if (c == '\n' || c == '\t') {
            out += lines ? static_cast<char>(c) : ' ';
        } else if (c == '\r') {
            out += lines ? "\\x0D" : " ";  // it would write the rest over the line's start
        } else if (c < 0x20 || c == 0x7F) {
            out += fmt::format("\\x{:02X}", c);
        } else if (c == 0xC2 && i + 1 < text.size() &&
                   static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
                   static_cast<unsigned char>(text[i + 1]) <= 0x9F) {
            // U+0080..U+009F, the C1 controls: U+009B starts an escape sequence as ESC [ does.
            out += fmt::format("\\u{:04X}", static_cast<unsigned char>(text[++i]));
        } else {
            out += static_cast<char>(c);
        }
    }
    return out;
}

}  // namespace hopper::text
