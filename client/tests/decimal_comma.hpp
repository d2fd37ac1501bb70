// A decimal-comma locale (de_DE.UTF-8) for the span of a test, whatever the machine has
// installed: it is compiled with localedef into a directory of the test's own (LOCPATH).
#pragma once

#include <optional>
#include <string>

namespace hopper::test {

class DecimalCommaLocale {
  public:
    // LC_NUMERIC is de_DE.UTF-8 while this lives, if active().
    DecimalCommaLocale();
    ~DecimalCommaLocale();
    DecimalCommaLocale(const DecimalCommaLocale&) = delete;
    DecimalCommaLocale& operator=(const DecimalCommaLocale&) = delete;

    bool active() const { return active_; }
    // Why it is not active (for GTEST_SKIP).
    const std::string& why_not() const { return why_not_; }

  private:
    bool active_ = false;
    std::string why_not_;
    std::string saved_numeric_;
    std::optional<std::string> saved_locpath_;
};

}  // namespace hopper::test
