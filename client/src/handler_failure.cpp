#include "handler_failure.hpp"

#include <algorithm>

#include "hopper/worker.hpp"

namespace hopper::internal {

namespace {

// The length of the valid UTF-8 sequence starting at s[i], or 0 when it is not one (overlong
// forms, surrogates and code points past U+10FFFF included, as PostgreSQL refuses them).
size_t utf8_sequence(std::string_view s, size_t i) {
    auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    unsigned char b = byte(i);
    if (b < 0x80) return 1;
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (b >= 0xC2 && b <= 0xDF) {
        n = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        n = 3;
        if (b == 0xE0) lo = 0xA0;
        if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
        n = 4;
        if (b == 0xF0) lo = 0x90;
        if (b == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (i + n > s.size()) return 0;
    if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
    for (size_t k = 2; k < n; ++k)
        if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
    return n;
}

}  // namespace

std::string valid_utf8(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (size_t i = 0; i < text.size();) {
        if (text[i] == '\0') {
            ++i;
            continue;
        }
        size_t n = utf8_sequence(text, i);
        if (n == 0) {
            out += "\xEF\xBF\xBD";  // U+FFFD REPLACEMENT CHARACTER
            ++i;
        } else {
            out.append(text.substr(i, n));
            i += n;
        }
    }
    return out;
}

FailOptions within_server_limits(FailOptions o) {
    if (o.retry_in) o.retry_in = std::clamp(*o.retry_in, Duration::zero(), kMaxRetryIn);
    return o;
}

HandlerFailure handler_failure(const std::exception_ptr& thrown) {
    HandlerFailure f;
    try {
        std::rethrow_exception(thrown);
    } catch (const RetryIn& e) {
        f.error = e.what();
        f.options.retry_in = e.delay();
    } catch (const PermanentFailure& e) {
        f.error = e.what();
        f.options.permanent = true;
    } catch (const std::exception& e) {
        f.error = e.what();
    } catch (...) {
        f.error = "handler threw a non-standard exception";
    }
    f.error = valid_utf8(f.error);
    if (f.error.empty()) f.error = "handler failed";
    f.options = within_server_limits(f.options);
    return f;
}

}  // namespace hopper::internal
