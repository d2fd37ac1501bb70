// Result: typed access to a PGresult's text-format values.
#include <charconv>
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

double Result::float8(int row, int col) const {
    // strtod: from_chars for floating point is not in GCC 10's library, and values are short.
    std::string s(text(row, col));
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (end == s.c_str()) throw std::runtime_error(fmt::format("column {} is not a number", col));
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
