// See include/hopper/cron.hpp.
#include "hopper/cron.hpp"

#include <algorithm>
#include <optional>
#include <cctype>
#include <sstream>
#include <vector>

namespace hopper::cron {
namespace {

struct Field {
    const char* name;
    int min;
    int max;
    const char* const* names;  // names[i] is the value min + i; nullptr: numbers only
};

const char* const kMonthNames[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                   "jul", "aug", "sep", "oct", "nov", "dec"};
const char* const kDayNames[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

const Field kFields[5] = {
    {"minute", 0, 59, nullptr},       {"hour", 0, 23, nullptr},
    {"day-of-month", 1, 31, nullptr}, {"month", 1, 12, kMonthNames},
    {"day-of-week", 0, 7, kDayNames},  // 7 is Sunday again; names cover 0..6
};

[[noreturn]] void refuse(const Field& f, const std::string& token, const std::string& why) {
    throw ParseError(std::string(f.name) + " field: \"" + token + "\" " + why);
}

// ASCII only: the C library's tolower follows the database's LC_CTYPE, and a Turkish one lowers
// the I of FRI to a dotless i.
std::string lower(std::string s) {
    for (char& c : s)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return s;
}

bool all_digits(const std::string& text) {
    return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c));
    });
}

// The value of a run of ASCII digits, leading zeros and all (Vixie cron reads "05" and "0005"
// alike); nullopt past 9999, which no field's value reaches, before stoi could overflow.
std::optional<int> digits_value(const std::string& digits) {
    size_t first = digits.find_first_not_of('0');
    if (first == std::string::npos) return 0;
    if (digits.size() - first > 4) return std::nullopt;
    return std::stoi(digits.substr(first));
}

int number(const Field& f, const std::string& token, const std::string& text, bool named) {
    if (all_digits(text)) {
        std::optional<int> v = digits_value(text);
        if (!v || *v < f.min || *v > f.max)
            refuse(f, token,
                   "is out of range " + std::to_string(f.min) + "-" + std::to_string(f.max));
        return *v;
    }
    if (named && f.names) {
        std::string l = lower(text);
        int count = f.max - f.min + 1 - (f.names == kDayNames ? 1 : 0);
        for (int i = 0; i < count; ++i)
            if (l == f.names[i]) return f.min + i;
    }
    if (text.empty()) refuse(f, token, "has a missing number");
    refuse(f, token,
           f.names ? "is neither a number nor a name (" + std::string(f.names[0]) + ", " +
                         f.names[1] + ", ...)"
                   : "is not a number");
}

// Parses one comma-separated field into `bits` (indexed by value).
template <size_t N>
void parse_field(const Field& f, const std::string& text, std::bitset<N>& bits) {
    std::vector<std::string> items;
    std::string item;
    std::istringstream in(text);
    while (std::getline(in, item, ',')) items.push_back(item);
    if (text.empty() || text.back() == ',') items.push_back("");
    for (const std::string& it : items) {
        if (it.empty()) refuse(f, text, "has an empty list element");
        std::string base = it;
        int step = 1;
        bool stepped = false;
        if (size_t slash = it.find('/'); slash != std::string::npos) {
            base = it.substr(0, slash);
            std::string s = it.substr(slash + 1);
            stepped = true;
            if (!all_digits(s)) refuse(f, it, "has a step that is not a positive number");
            std::optional<int> v = digits_value(s);
            if (!v) refuse(f, it, "has a step above 9999");
            step = *v;
            if (step < 1) refuse(f, it, "has a step of 0");
        }
        int lo, hi;
        if (base == "*") {
            lo = f.min;
            hi = f.max;
        } else if (size_t dash = base.find('-'); dash != std::string::npos) {
            lo = number(f, it, base.substr(0, dash), true);
            hi = number(f, it, base.substr(dash + 1), true);
            if (lo > hi) refuse(f, it, "is a range that runs backwards");
        } else {
            lo = number(f, it, base, true);
            hi = stepped ? f.max : lo;
        }
        for (int v = lo; v <= hi; v += step) bits.set(static_cast<size_t>(v));
    }
}

// Days since 1970-01-01 of a proleptic Gregorian date, and back (H. Hinnant's algorithms).
int64_t days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const int64_t yoe = y - era * 400;
    const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

void civil_from_days(int64_t z, int64_t& y, int& m, int& d) {
    z += 719468;
    const int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    const int64_t doe = z - era * 146097;
    const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    const int64_t mp = (5 * doy + 2) / 153;
    d = static_cast<int>(doy - (153 * mp + 2) / 5 + 1);
    m = static_cast<int>(mp < 10 ? mp + 3 : mp - 9);
    y = yoe + era * 400 + (m <= 2);
}

int weekday(int64_t days) {  // 1970-01-01 was a Thursday
    int64_t w = (days + 4) % 7;
    return static_cast<int>(w < 0 ? w + 7 : w);
}

int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

bool day_matches(const Schedule& s, int d, int64_t days) {
    bool dom = s.days_of_month[static_cast<size_t>(d)];
    bool dow = s.days_of_week[static_cast<size_t>(weekday(days))];
    // Vixie cron: with either field starting with `*` both must match, otherwise either may.
    return (s.dom_star || s.dow_star) ? dom && dow : dom || dow;
}

// Whether the day-of-month field names a day that some chosen month has (February: 29).
bool some_day_exists(const Schedule& s) {
    const int longest[13] = {0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    for (int m = 1; m <= 12; ++m)
        for (int d = 1; s.months[static_cast<size_t>(m)] && d <= longest[m]; ++d)
            if (s.days_of_month[static_cast<size_t>(d)]) return true;
    return false;
}

std::string macro(const std::string& word) {
    std::string w = lower(word);
    if (w == "@yearly" || w == "@annually") return "0 0 1 1 *";
    if (w == "@monthly") return "0 0 1 * *";
    if (w == "@weekly") return "0 0 * * 0";
    if (w == "@daily" || w == "@midnight") return "0 0 * * *";
    if (w == "@hourly") return "0 * * * *";
    throw ParseError("unknown macro \"" + word +
                     "\" (known: @yearly, @annually, @monthly, @weekly, @daily, @midnight, "
                     "@hourly)");
}

}  // namespace

Schedule parse(const std::string& expression) {
    std::vector<std::string> fields;
    {
        std::istringstream in(expression);
        std::string w;
        while (in >> w) fields.push_back(w);
    }
    if (fields.size() == 1 && fields[0][0] == '@') return parse(macro(fields[0]));
    if (fields.size() != 5)
        throw ParseError(
            "expected 5 fields (minute hour day-of-month month day-of-week) or a "
            "macro such as @daily, got " +
            std::to_string(fields.size()));
    Schedule s;
    std::bitset<8> dow;
    parse_field(kFields[0], fields[0], s.minutes);
    parse_field(kFields[1], fields[1], s.hours);
    parse_field(kFields[2], fields[2], s.days_of_month);
    parse_field(kFields[3], fields[3], s.months);
    parse_field(kFields[4], fields[4], dow);
    for (size_t d = 0; d < 7; ++d) s.days_of_week[d] = dow[d];
    if (dow[7]) s.days_of_week.set(0);
    s.dom_star = fields[2][0] == '*';
    s.dow_star = fields[4][0] == '*';
    if ((s.dom_star || s.dow_star) && !some_day_exists(s))
        throw ParseError("never matches: no chosen month has day-of-month \"" + fields[2] + "\"");
    return s;
}

std::optional<int64_t> next_after(const Schedule& s, int64_t after) {
    int64_t t = floor_div(after, 60) * 60 + 60;
    const int64_t limit = t + kSearchYears * 366 * 86400;
    while (t <= limit) {
        int64_t days = floor_div(t, 86400);
        int64_t secs = t - days * 86400;
        int64_t y;
        int m, d;
        civil_from_days(days, y, m, d);
        if (!s.months[static_cast<size_t>(m)]) {
            t = days_from_civil(m == 12 ? y + 1 : y, m == 12 ? 1 : m + 1, 1) * 86400;
            continue;
        }
        if (!day_matches(s, d, days)) {
            t = (days + 1) * 86400;
            continue;
        }
        int64_t h = secs / 3600;
        if (!s.hours[static_cast<size_t>(h)]) {
            t = days * 86400 + (h + 1) * 3600;
            continue;
        }
        if (!s.minutes[static_cast<size_t>((secs % 3600) / 60)]) {
            t += 60;
            continue;
        }
        return t;
    }
    return std::nullopt;
}

std::optional<int64_t> last_at_or_before(const Schedule& s, int64_t floor, int64_t at) {
    // Widening windows back from `at`: the first window with a match holds few matches before the
    // last one (a dense schedule matches within the first hour), so walking them stays short.
    const int64_t windows[] = {3600, 86400, 32 * 86400, 367 * 86400, kSearchYears * 366 * 86400};
    for (int64_t w : windows) {
        int64_t from = std::max(floor, at - w);
        std::optional<int64_t> t = next_after(s, from);
        if (t && *t <= at) {
            for (auto n = next_after(s, *t); n && *n <= at; n = next_after(s, *n)) t = n;
            return t;
        }
        if (from == floor) break;
    }
    return std::nullopt;
}

}  // namespace hopper::cron
