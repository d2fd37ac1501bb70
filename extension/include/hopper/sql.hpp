// SQL fragments shared by several statements. Every name is schema-qualified so the caller's
// search_path cannot redirect it; values are always bound parameters. So are operators whose
// operands have no operator of their exact types in pg_catalog (hopper.job_state has only
// =(anyenum, anyenum) there): an exact-type operator planted in a schema on the caller's path
// would win over it, pg_catalog first or not, and run as whoever calls hopper. Hence
// `state OPERATOR(pg_catalog.=) 'running'`, and integers cast to text before a ||.
#pragma once

// The columns a finished job carries from hopper.jobs into hopper.job_history, in history order
// minus (state, finished_at, result), which each statement supplies.
#define HOPPER_HISTORY_INSERT                                                                  \
    "INSERT INTO hopper.job_history (id, queue, priority, run_at, attempt, max_attempts, "     \
    "created_at, started_at, kind, worker, dedup_key, concurrency_key, progress, last_error, " \
    "errors, progress_detail, payload, state, finished_at, result) "

// A finished job's finished_at: the finishing clock (its transaction's start, or a rescue's
// clock), but never before the job was created or started. A transaction older than the job (a
// waiting take, whose clock is read at each attempt; a completion in a transaction begun before
// the push) would otherwise record a finish before both, and a dedup window, which counts on
// finished_at >= created_at, would miss the job. A start still ahead of the clock was dated so by
// a pull's `at` and has not happened: it does not count. clock_timestamp() is read only for a job
// started after the finishing clock, rare on the hot path. Each term is a time before this
// transaction commits, as dedup::finished_before needs.
#define HOPPER_FINISHED_AT(alias, clock)                                                \
    "GREATEST(" clock ", " alias ".created_at, CASE WHEN " alias ".started_at > " clock \
    " AND " alias ".started_at <= pg_catalog.clock_timestamp() THEN " alias ".started_at END)"

#define HOPPER_HISTORY_SELECT(alias)                                                       \
    "SELECT " alias ".id, " alias ".queue, " alias ".priority, " alias ".run_at, " alias   \
    ".attempt, " alias ".max_attempts, " alias ".created_at, " alias ".started_at, " alias \
    ".kind, " alias ".worker, " alias ".dedup_key, " alias ".concurrency_key, "

// Whether the queue of a finished job `alias` announces it on "hopper:done"
// (hopper.queue_set_notify_done). A primary-key lookup in the statement that finishes the job, so
// a completion costs no extra round trip for it.
#define HOPPER_QUEUE_NOTIFIES_DONE(alias) \
    "(SELECT nq.notify_done FROM hopper.queues nq WHERE nq.name = " alias ".queue)"

// Whether the queue of job `alias` has limits (hopper.queues.limited): a running job of it that
// finishes, or is put back for later, frees a slot that a waiting pull may take
// (notify::slot_freed).
#define HOPPER_QUEUE_LIMITED(alias) \
    "COALESCE((SELECT lq.limited FROM hopper.queues lq WHERE lq.name = " alias ".queue), false)"

// Whether the queue of a finished job `alias` keeps it in hopper.job_history: a queue with
// retention 0 deletes its finished jobs outright, as the plain-SQL queue does, and skips the copy
// and its index entries. A job whose queue is gone is kept, as before the setting existed.
#define HOPPER_QUEUE_KEEPS_HISTORY(alias)                                                       \
    "COALESCE((SELECT kq.retention > interval '0' FROM hopper.queues kq WHERE kq.name = " alias \
    ".queue), true)"

// Whether an id found neither in hopper.jobs nor in hopper.job_history may still be a job that
// finished and is no longer kept: it was issued (ids start at 1). Its queue may keep no history,
// may have pruned it, or may have been dropped, and a queue's retention may have changed since:
// such an id answers as a lost lease would, not as an unknown job. Before the first push the
// sequence holds last_value 1 with is_called false: nothing was issued.
#define HOPPER_MAY_BE_UNKEPT(id_expr)                      \
    "(" id_expr " > 0 AND " id_expr                        \
    " <= (SELECT CASE WHEN s.is_called THEN s.last_value " \
    "ELSE s.last_value - 1 END FROM hopper.job_id_seq s))"

// The time a job's reported state is read against: the clock when the statement runs, read after
// its snapshot was taken. Every job the statement sees was pushed before that (its created_at is
// the pushing transaction's start), so a job due at its push never reads as scheduled, however
// long ago the reading transaction began, as it did against now(), that transaction's start; nor
// does a job that fell due since. An InitPlan: read once, and usable as an index condition. A
// statement whose comparisons must agree with each other (counts and filters over the same rows)
// reads it from HOPPER_CLOCK_CTE, so that every comparison sees the same time; job_status may
// use it once per branch, a job being in one of them only.
#define HOPPER_CLOCK "(SELECT pg_catalog.clock_timestamp())"
#define HOPPER_CLOCK_CTE "WITH clock AS MATERIALIZED (SELECT pg_catalog.clock_timestamp() AS t) "
#define HOPPER_CLOCK_OF_CTE "(SELECT clock.t FROM clock)"

// A live job's state as the functions report it: an available job whose run_at is still ahead
// of `now` (HOPPER_CLOCK or HOPPER_CLOCK_OF_CTE) is scheduled (job_status, queue_jobs,
// queue_retry's refusal). Columns of hopper.jobs, unqualified.
#define HOPPER_REPORTED_STATE_AT(now)                                      \
    "CASE WHEN state OPERATOR(pg_catalog.=) 'available' AND run_at > " now \
    "  THEN 'scheduled' "                                                  \
    "ELSE state::text END"

// jobs.errors with one entry appended, keeping the newest 20: {attempt, at, error, worker}. A
// value that is not an array (a row written by hand) starts a new one: jsonb_array_length of a
// scalar failed the rescue, and with it every reaper pass of the database.
#define HOPPER_ERRORS_SO_FAR(alias)                                              \
    "(CASE WHEN pg_catalog.jsonb_typeof(" alias ".errors) = 'array' THEN " alias \
    ".errors ELSE '[]'::jsonb END)"
#define HOPPER_ERRORS_APPEND(alias, error_expr, at_expr) \
    "pg_catalog.jsonb_concat(CASE WHEN pg_catalog.jsonb_array_length(" HOPPER_ERRORS_SO_FAR(      \
        alias) ") >= 20 THEN pg_catalog.jsonb_delete(" HOPPER_ERRORS_SO_FAR(alias) ", 0) "        \
    "ELSE " HOPPER_ERRORS_SO_FAR(alias) " END, pg_catalog.jsonb_build_array("                    \
    "pg_catalog.jsonb_build_object('attempt', " alias ".attempt, 'at', " at_expr                  \
    ", 'error', " error_expr ", 'worker', " alias ".worker)))"

// Exponential backoff with jitter for a job j of queue q: base * 2^attempt, capped, minus up to
// jitter (a fraction) of it so that a burst of failures does not come back as a burst. Reckoned in
// seconds as float8: an interval's microseconds overflow (22008) once base * 2^attempt passes
// 292,000 years, which a base of hours reaches by the 30th attempt, before the cap could apply.
// The exponent stops at 500, where even a base of a microsecond is past any cap (an exponent of
// 30 left a base of a millisecond at 12 days under a cap of 30), and far below float8's range.
#define HOPPER_BACKOFF(j, q)                                                  \
    "pg_catalog.make_interval(secs => LEAST(pg_catalog.date_part('epoch', " q \
    ".backoff_cap), "                                                         \
    "pg_catalog.date_part('epoch', " q                                        \
    ".backoff_base) * pg_catalog.power(2::float8, "                           \
    "LEAST(" j ".attempt, 500)::float8)) * (1.0::float8 - " q                 \
    ".jitter::float8 * pg_catalog.random()))"
