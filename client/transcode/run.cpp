// run: the worker process. The hopper runtime pulls, heartbeats and reports, and stops once it
// has handled --max-jobs; this file wires the handler in and decides when a worker run with
// --exit-when-idle is done.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <hopper/client.hpp>
#include <hopper/utf8.hpp>
#include <hopper/worker.hpp>

#include "commands.hpp"
#include "paths.hpp"
#include "process.hpp"
#include "publish.hpp"
#include "settler.hpp"
#include "transcode_job.hpp"
#include "video_store.hpp"

namespace transcode {

namespace {

// How often the rows of jobs that ended without a worker are settled (settler.hpp).
constexpr std::chrono::seconds kSettleInterval{15};
// `ffmpeg -version` takes milliseconds; a cold network file system may take a few seconds.
constexpr std::chrono::seconds kProgramCheckLimit{20};

// Stops the worker once the queue has nothing available or running (scheduled retries in the
// future do not keep it alive). Checked on its own connection every half second.
class IdleWatch {
  public:
    IdleWatch(const std::string& conninfo, const std::string& queue, hopper::Worker& worker,
              Log& log)
        : client_(conninfo), queue_(queue), worker_(worker), log_(log) {
        thread_ = std::thread([this] { loop(); });
    }
    ~IdleWatch() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            done_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
    IdleWatch(const IdleWatch&) = delete;
    IdleWatch& operator=(const IdleWatch&) = delete;

  private:
    bool idle() {
        try {
            for (const auto& s : client_.stats(queue_))
                if (s.queue == queue_) return s.available == 0 && s.running == 0;
        } catch (const hopper::Error& e) {
            // No such queue (nothing was ever submitted to it): nothing to wait for.
            if (e.sqlstate() != hopper::sqlstate::kNoData) throw;
        }
        return true;
    }
    void loop() {
        int idle_checks = 0;
        std::unique_lock<std::mutex> lock(mutex_);
        while (!cv_.wait_for(lock, std::chrono::milliseconds(500), [&] { return done_; })) {
            try {
                // Twice in a row, so a job between push and pull is not mistaken for idleness.
                idle_checks = idle() ? idle_checks + 1 : 0;
            } catch (const std::exception& e) {
                log_.error(fmt::format("idle check failed: {}", e.what()));
                idle_checks = 0;
            }
            if (idle_checks >= 2) {
                log_.info(fmt::format("queue {} is idle: stopping", queue_));
                worker_.stop();
                return;
            }
        }
    }

    hopper::Client client_;
    std::string queue_;
    hopper::Worker& worker_;
    Log& log_;
    std::mutex mutex_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;
};

}  // namespace

int run_command(const Args& args) {
    const RunArgs& r = args.run;
    Log log(r.quiet);
    JobSettings settings;
    settings.output_dir = absolute_path(r.output_dir);
    // A relative directory takes '%' from the working directory's path: ffmpeg's segment
    // templates give it a meaning of their own, and every job would fail writing its stream.
    if (settings.output_dir.find('%') != std::string::npos)
        throw UsageError(
            fmt::format("--output-dir: must not contain '%' (it is {})", settings.output_dir));
    settings.encode = r.encode;
    settings.ffprobe = r.ffprobe;
    settings.timeout = r.timeout;
    const std::pair<const char*, const std::string&> tools[] = {
        {"--ffmpeg", settings.encode.ffmpeg}, {"--ffprobe", settings.ffprobe}};
    for (const auto& [option, tool] : tools) {
        std::string problem = program_problem(tool, kProgramCheckLimit);
        if (!problem.empty())
            throw UsageError(fmt::format("{} {}: {} (install ffmpeg, or name the program with {})",
                                         option, tool, problem, option));
    }
    {
        hopper::Client client(args.conninfo);
        ensure_schema(client);
        // What the worker writes into every job and row: refused by the server at each pull, or
        // only once an encode is done, and then again at every attempt.
        if (hopper::utf8_session(client)) {
            require_utf8("--name", r.name, "the worker's name is recorded on its jobs as text");
            require_utf8("--output-dir", settings.output_dir,
                         "each video row holds its stream's path as text in the database");
        }
    }
    // A job's first write is its staging directory: one made and removed here shows the output
    // directory can take them (it exists or can be made, is a directory, is writable), before a
    // job is taken rather than after every job failed all its attempts.
    try {
        StagingDir check(settings.output_dir, "hopper-transcode-start");
    } catch (const std::system_error& e) {
        throw UsageError(fmt::format("--output-dir: {}", e.what()));
    }

    hopper::WorkerOptions opt;
    opt.conninfo = args.conninfo;
    opt.queue = args.queue;
    opt.concurrency = r.concurrency;
    opt.max_batch = r.concurrency;
    // A transcode runs for minutes: a clip should start on an idle transcoder, not wait here.
    opt.prefetch = 0;
    // No more jobs claimed than that, whatever --concurrency: a stop() once the Nth job was done
    // came too late for the others the worker had claimed meanwhile, which it encoded too.
    opt.max_jobs = r.max_jobs;
    opt.lease = r.lease;
    opt.name = r.name;
    opt.poll_interval = r.poll_interval;
    opt.shutdown_timeout = r.shutdown_timeout;
    opt.session_bound = r.session_bound;
    opt.log = [&log](const std::string& msg) { log.error("worker: " + msg); };
    hopper::Worker worker(opt);

    worker.on(kJobKind, [&](hopper::JobContext& job) { transcode_video(job, settings, log); });
    log.info(fmt::format("hopper-transcode: queue {}, concurrency {}, output {}{}", args.queue,
                         r.concurrency, settings.output_dir, r.encode.ladder ? ", ladder" : ""));
    Settler settler(args.conninfo, settings.output_dir, kSettleInterval, log);
    std::optional<IdleWatch> idle;
    if (r.exit_when_idle) idle.emplace(args.conninfo, args.queue, worker, log);
    worker.run();
    auto st = worker.stats();
    log.info(
        fmt::format("hopper-transcode: stopped ({} completed, {} failed, {} lost, {} released)",
                    st.completed, st.failed, st.lost, st.released));
    return 0;
}

}  // namespace transcode
