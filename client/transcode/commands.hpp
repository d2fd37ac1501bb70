// The three commands; each returns the process exit status.
#pragma once

#include "cli_args.hpp"

namespace transcode {

int submit_command(const Args& args);
int status_command(const Args& args);
int run_command(const Args& args);

}  // namespace transcode
