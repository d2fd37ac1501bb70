#include "decimal_comma.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <clocale>
#include <cstdlib>

#include <fmt/format.h>

namespace hopper::test {

namespace {
constexpr const char* kLocale = "de_DE.UTF-8";

// The directory holding the compiled locale, made once per test program ("" if localedef failed).
const std::string& compiled_locales() {
    static const std::string dir = [] {
        char tmpl[] = "/tmp/hopper-locale-XXXXXX";
        if (::mkdtemp(tmpl) == nullptr) return std::string();
        std::string d = tmpl;
        std::string cmd =
            fmt::format("localedef -i de_DE -f UTF-8 {}/{} >/dev/null 2>&1", d, kLocale);
        return std::system(cmd.c_str()) == 0 ? d : std::string();
    }();
    return dir;
}
}  // namespace

DecimalCommaLocale::DecimalCommaLocale() {
    const char* before = std::setlocale(LC_NUMERIC, nullptr);
    saved_numeric_ = before ? before : "C";
    if (const char* p = std::getenv("LOCPATH")) saved_locpath_ = p;
    // An installed de_DE first; else the one compiled here.
    if (std::setlocale(LC_NUMERIC, kLocale) == nullptr) {
        const std::string& dir = compiled_locales();
        if (dir.empty()) {
            why_not_ = "de_DE.UTF-8 is not installed and localedef could not compile it";
            return;
        }
        ::setenv("LOCPATH", dir.c_str(), 1);
        if (std::setlocale(LC_NUMERIC, kLocale) == nullptr) {
            why_not_ = "the compiled de_DE.UTF-8 could not be loaded";
            return;
        }
    }
    active_ = true;
}

DecimalCommaLocale::~DecimalCommaLocale() {
    std::setlocale(LC_NUMERIC, saved_numeric_.c_str());
    if (saved_locpath_)
        ::setenv("LOCPATH", saved_locpath_->c_str(), 1);
    else
        ::unsetenv("LOCPATH");
}

}  // namespace hopper::test
