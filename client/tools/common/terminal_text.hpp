// Text from the database or from programs (a job's error, a file name, ffmpeg's output) made fit
// for a terminal: one rule for every command-line tool of hopper.
#pragma once

#include <string>
#include <string_view>

namespace hopper::text {

// Control characters, which would let that text move the cursor, clear the screen or retitle the
// window, become visible escapes: \x1B for C0 and DEL, \u009B for C1. With `lines`, line breaks
// stay; otherwise they, carriage returns and tabs become spaces, keeping the text on one line.
std::string terminal_text(std::string_view text, bool lines = false);

}  // namespace hopper::text
