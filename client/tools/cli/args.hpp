// Command-line parsing for the hopper tool: positional words and --name value / --name=value
// options, checked against what each command accepts.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace hopper::cli {

// A usage mistake: reported with the command's help, exit code 1.
class UsageError : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

struct Args {
    std::vector<std::string> positional;
    std::map<std::string, std::string> options;  // without the leading "--"
    std::set<std::string> flags;

    bool flag(const std::string& name) const { return flags.count(name) > 0; }
    std::optional<std::string> option(const std::string& name) const;
    std::optional<long long> integer(const std::string& name, long long min, long long max) const;
    std::optional<double> seconds(const std::string& name) const;
};

// Splits argv; `value_options` take a value, `flag_options` do not. Anything else is a UsageError.
Args parse(const std::vector<std::string>& argv, const std::set<std::string>& value_options,
           const std::set<std::string>& flag_options);

long long parse_integer(const std::string& what, const std::string& text, long long min,
                        long long max);

}  // namespace hopper::cli
