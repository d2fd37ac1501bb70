// Argument parsing; see args.hpp.
#include "args.hpp"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

namespace hopper::cli {

std::optional<std::string> Args::option(const std::string& name) const {
    auto it = options.find(name);
    if (it == options.end()) return std::nullopt;
    return it->second;
}

long long parse_integer(const std::string& what, const std::string& text, long long min,
                        long long max) {
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || errno == ERANGE || v < min || v > max)
        throw UsageError(fmt::format("{} must be a whole number from {} to {}, got \"{}\"", what,
                                     min, max, text));
    return v;
}

std::optional<long long> Args::integer(const std::string& name, long long min,
                                       long long max) const {
    auto v = option(name);
    if (!v) return std::nullopt;
    return parse_integer("--" + name, *v, min, max);
}

std::optional<double> Args::seconds(const std::string& name) const {
    auto v = option(name);
    if (!v) return std::nullopt;
    char* end = nullptr;
    double d = std::strtod(v->c_str(), &end);
    // The range is in the message: "1e9" is a number of seconds, only too many.
    if (v->empty() || *end != '\0' || !std::isfinite(d) || d < 0 || d > 86400.0 * 366)
        throw UsageError(fmt::format(
            "--{} must be a number of seconds from 0 to 31622400 (366 days), got \"{}\"", name,
            *v));
    return d;
}

Args parse(const std::vector<std::string>& argv, const std::set<std::string>& value_options,
           const std::set<std::string>& flag_options) {
    Args a;
    bool only_positional = false;
    for (size_t i = 0; i < argv.size(); ++i) {
        const std::string& w = argv[i];
        if (only_positional || w.size() < 2 || w[0] != '-') {
            a.positional.push_back(w);
            continue;
        }
        if (w == "--") {
            only_positional = true;
            continue;
        }
        if (w == "-h") {
            a.flags.insert("help");
            continue;
        }
        if (w.rfind("--", 0) != 0) {
            // A negative number as a positional value (e.g. a priority) is not an option.
            if (w.find_first_not_of("0123456789", 1) == std::string::npos) {
                a.positional.push_back(w);
                continue;
            }
            throw UsageError(fmt::format("unknown option {}", w));
        }
        std::string name = w.substr(2);
        std::optional<std::string> value;
        if (auto eq = name.find('='); eq != std::string::npos) {
            value = name.substr(eq + 1);
            name = name.substr(0, eq);
        }
        if (flag_options.count(name)) {
            if (value) throw UsageError(fmt::format("--{} takes no value", name));
            a.flags.insert(name);
        } else if (value_options.count(name)) {
            if (!value) {
                if (i + 1 >= argv.size()) throw UsageError(fmt::format("--{} needs a value", name));
                value = argv[++i];
            }
            a.options[name] = *value;
        } else {
            throw UsageError(fmt::format("unknown option --{}", name));
        }
    }
    return a;
}

}  // namespace hopper::cli
