// How the hopper tool shows things: times, ages, aligned tables, and JSON for --json.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "hopper/types.hpp"
#include "terminal_text.hpp"

namespace hopper::cli {

std::string time_text(TimePoint t);  // 2026-11-21 12:00:05 UTC, or "after 2262-04-11"
// "2026-11-21T12:00:05.123456Z", "infinity" / "-infinity" past the clock's ends, or null
std::string time_json(const std::optional<TimePoint>& t);
std::string age_text(Duration d);  // 850ms, 12s, 3m05s, 2h03m, 4d02h
std::string opt_json(const std::optional<std::string>& raw_json);     // raw JSON or null
std::string opt_string_json(const std::optional<std::string>& text);  // quoted or null

bool progress_known(const JobInfo& j);  // a progress that is a finite number
std::string job_json(const JobInfo& j);

// Text from the database (a job's kind, worker or error, a server message) fit for a terminal.
using text::terminal_text;
std::string stat_json(const QueueStat& s);

// Columns padded to their widest cell; the last column is not padded.
class Table {
  public:
    explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
    // A cell is one line: line breaks in it (a two-line error) become spaces, so that columns
    // stay aligned and each job stays on its own line; other control characters are escaped.
    void add(std::vector<std::string> row) {
        for (auto& cell : row) cell = terminal_text(cell);
        rows_.push_back(std::move(row));
    }
    void print(std::ostream& out) const;

  private:
    std::vector<std::string> header_;
    std::vector<std::vector<std::string>> rows_;
};

}  // namespace hopper::cli
