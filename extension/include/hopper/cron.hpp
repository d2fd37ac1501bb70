// Cron expressions in UTC: five fields (minute hour day-of-month month day-of-week) or a macro.
// Pure C++ with no PostgreSQL calls, so the parser and the search can never longjmp.
//
// Syntax, as Vixie cron: each field is `*` or a comma list of `N`, `N-M`, with an optional step
// `/S` after `*`, a range, or a single start (`5/10` = from 5 to the field's end, every 10).
// Months and weekdays also by name (jan..dec, sun..sat, any case); weekday 0 and 7 are Sunday.
// When both day-of-month and day-of-week are restricted (neither starts with `*`), a day matching
// either one runs. Macros: @yearly @annually @monthly @weekly @daily @midnight @hourly.
#pragma once

#include <bitset>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace hopper::cron {

// A refused expression; the message names the field and the bad token.
class ParseError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

struct Schedule {
    std::bitset<60> minutes;
    std::bitset<24> hours;
    std::bitset<32> days_of_month;  // 1..31
    std::bitset<13> months;         // 1..12
    std::bitset<7> days_of_week;    // 0..6, Sunday = 0
    bool dom_star = false;          // the field starts with `*`
    bool dow_star = false;
};

// Parses an expression. Refuses one that can never match (e.g. `0 0 30 2 *`).
Schedule parse(const std::string& expression);

// How far ahead next_after looks: the Gregorian calendar repeats every 400 years, so a schedule
// that matches any minute matches one within them. Ten years were not enough: Feb 29 on a Sunday
// ("0 0 29 2 */7", a day-of-week starting with *) falls in 2032, 2060, 2088 and then 2128.
constexpr int64_t kSearchYears = 400;

// The first matching minute strictly after `after` (both in seconds since 1970-01-01 UTC), or
// nothing within kSearchYears.
std::optional<int64_t> next_after(const Schedule& s, int64_t after);

// The last matching minute at or before `at` and strictly after `floor`, or nothing.
std::optional<int64_t> last_at_or_before(const Schedule& s, int64_t floor, int64_t at);

}  // namespace hopper::cron
