// Result: typed access to a PGresult's text-format values.
#include <locale.h>
#include <stdlib.h>

#include <charconv>
#include <clocale>
#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>
#include <libpq-fe.h>

#include "hopper/connection.hpp"

namespace hopper {

void Result::Free::operator()(pg_result* r) const noexcept {
    PQclear(r);
}

Result::Result(pg_result* res) : res_(res) {}

int Result::rows() const {
    return res_ ? PQntuples(res_.get()) : 0;
}
int Result::columns() const {
    return res_ ? PQnfields(res_.get()) : 0;
}

int Result::column(const char* name) const {
    int c = res_ ? PQfnumber(res_.get(), name) : -1;
    if (c < 0) throw std::out_of_range(fmt::format("result has no column \"{}\"", name));
    return c;
}

bool Result::is_null(int row, int col) const {
    return PQgetisnull(res_.get(), row, col) != 0;
}

std::string_view Result::text(int row, int col) const {
    return std::string_view(PQgetvalue(res_.get(), row, col),
                            static_cast<size_t>(PQgetlength(res_.get(), row, col)));
}

std::optional<std::string> Result::opt_text(int row, int col) const {
    if (is_null(row, col)) return std::nullopt;
    return std::string(text(row, col));
}

int64_t Result::int64(int row, int col) const {
    std::string_view s = text(row, col);
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size())
        throw std::runtime_error(fmt::format("column {} is not an integer: \"{}\"", col, s));
    return v;
}

std::optional<int64_t> Result::opt_int64(int row, int col) const {
    if (is_null(row, col)) return std::nullopt;
    return int64(row, col);
}

namespace {
// The "C" locale, made once: the server writes numbers with a decimal point whatever the
// process's locale says (plain strtod under de_DE read "0.5" as 0).
locale_t c_locale() {
    static const locale_t c = newlocale(LC_ALL_MASK, "C", static_cast<locale_t>(nullptr));
    return c;
}
}  // namespace

double Result::float8(int row, int col) const {
    // strtod_l rather than from_chars: it reads every value the server writes, subnormals too.
    std::string s(text(row, col));
    char* end = nullptr;
    double v = strtod_l(s.c_str(), &end, c_locale());
    if (s.empty() || end != s.c_str() + s.size())
        throw std::runtime_error(fmt::format("column {} is not a number: \"{}\"", col, s));
    return v;
}

bool Result::boolean(int row, int col) const {
    return text(row, col) == "t";
}

int64_t Result::affected_rows() const {
    const char* n = res_ ? PQcmdTuples(res_.get()) : "";
    return *n ? std::strtoll(n, nullptr, 10) : 0;
}

}  // namespace hopper
