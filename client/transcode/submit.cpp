// submit: what a web API does after storing an upload, as a command.
#include <iostream>

#include <fmt/format.h>
#include <hopper/client.hpp>
#include <hopper/utf8.hpp>

#include "commands.hpp"
#include "paths.hpp"
#include "terminal_text.hpp"
#include "video_store.hpp"

namespace transcode {

int submit_command(const Args& args) {
    // Workers may run in another directory: the job carries an absolute path, one that names the
    // same file as the one given (paths.hpp). The file itself is not checked here; a missing file
    // is the worker's clear, permanent failure.
    std::string path = absolute_path(args.submit.file);
    hopper::Client client(args.conninfo);
    ensure_schema(client);
    if (hopper::utf8_session(client)) {
        // Checked whole: the working directory's name is part of it.
        require_utf8("FILE", path,
                     "the video row and its job hold the path as text in the database; rename "
                     "the file (convmv can) and submit it again");
    }
    Submitted s = submit_video(client, args.queue, args.submit.id, path, args.submit.max_attempts);
    std::cerr << fmt::format("video {} submitted: {} (queue {})\n", s.video_id,
                             hopper::text::terminal_text(path), args.queue);
    std::cout << s.job_id << std::endl;
    return 0;
}

}  // namespace transcode
