// Errors raised by the client: every server error keeps its SQLSTATE, so callers can tell "no such
// job" (P0002) from "bad argument" (22023) from "the connection is gone" (class 08).
#pragma once

#include <stdexcept>
#include <string>

namespace hopper {

class Error : public std::runtime_error {
  public:
    Error(std::string sqlstate, const std::string& message, std::string detail = {},
          std::string hint = {})
        : std::runtime_error(message),
          sqlstate_(std::move(sqlstate)),
          detail_(std::move(detail)),
          hint_(std::move(hint)) {}

    // Five-character SQLSTATE ("P0002", "22023", ...); empty when the server sent none.
    const std::string& sqlstate() const noexcept { return sqlstate_; }
    const std::string& detail() const noexcept { return detail_; }
    const std::string& hint() const noexcept { return hint_; }

  private:
    std::string sqlstate_;
    std::string detail_;
    std::string hint_;
};

// The connection could not be made or was lost (SQLSTATE 08006; the message has the server's
// last words, such as "terminating connection due to administrator command"). Retrying after a
// reconnect may succeed. An error the server raises on a live connection is a plain Error with
// its own SQLSTATE, whatever its class: a dblink's 08001 says that another server is down.
class ConnectionError : public Error {
  public:
    explicit ConnectionError(const std::string& message) : Error("08006", message) {}
};

// SQLSTATEs the queue functions use, for comparing against Error::sqlstate().
namespace sqlstate {
inline constexpr const char* kNoData = "P0002";            // unknown job or queue
inline constexpr const char* kInvalidParameter = "22023";  // bad argument value
inline constexpr const char* kNullNotAllowed = "22004";    // NULL where a value is required
inline constexpr const char* kNumericOutOfRange = "22003";
inline constexpr const char* kCharacterNotInRepertoire = "22021";  // e.g. a NUL byte in text
inline constexpr const char* kProgramLimitExceeded = "54000";      // payload or name too large
inline constexpr const char* kStatementTooComplex = "54001";       // JSON nested too deeply
inline constexpr const char* kObjectNotInState = "55000";          // e.g. retry of a running job
inline constexpr const char* kUndefinedFunction = "42883";
inline constexpr const char* kQueryCanceled = "57014";     // cancelled, or statement_timeout
inline constexpr const char* kLockNotAvailable = "55P03";  // lock_timeout ran out
}  // namespace sqlstate

}  // namespace hopper
