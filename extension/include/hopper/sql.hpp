// SQL fragments shared by several statements. Every name is schema-qualified so the caller's
// search_path cannot redirect it; values are always bound parameters.
#pragma once

// The columns a finished job carries from hopper.jobs into hopper.job_history, in history order
// minus (state, finished_at, result), which each statement supplies.
#define HOPPER_HISTORY_INSERT                                                                  \
    "INSERT INTO hopper.job_history (id, queue, priority, run_at, attempt, max_attempts, "     \
    "created_at, started_at, kind, worker, dedup_key, concurrency_key, progress, last_error, " \
    "errors, progress_detail, payload, state, finished_at, result) "

#define HOPPER_HISTORY_SELECT(alias)                                                       \
    "SELECT " alias ".id, " alias ".queue, " alias ".priority, " alias ".run_at, " alias   \
    ".attempt, " alias ".max_attempts, " alias ".created_at, " alias ".started_at, " alias \
    ".kind, " alias ".worker, " alias ".dedup_key, " alias ".concurrency_key, "

// In the RETURNING list of an INSERT INTO hopper.job_history: whether the finished job's queue
// announces finished jobs on "hopper:done" (hopper.queue_set_notify_done). A primary-key lookup in
// the statement that moves the job, so a completion costs no extra round trip for it.
#define HOPPER_QUEUE_NOTIFIES_DONE \
    "(SELECT nq.notify_done FROM hopper.queues nq WHERE nq.name = job_history.queue)"

// jobs.errors with one entry appended, keeping the newest 20: {attempt, at, error, worker}.
#define HOPPER_ERRORS_APPEND(alias, error_expr, at_expr)                              \
    "pg_catalog.jsonb_concat(CASE WHEN pg_catalog.jsonb_array_length(COALESCE(" alias \
    ".errors, '[]'::jsonb)) >= 20 THEN pg_catalog.jsonb_delete(" alias                \
    ".errors, 0) "                                                                    \
    "ELSE COALESCE(" alias                                                            \
    ".errors, '[]'::jsonb) END, pg_catalog.jsonb_build_array("                        \
    "pg_catalog.jsonb_build_object('attempt', " alias ".attempt, 'at', " at_expr      \
    ", 'error', " error_expr ", 'worker', " alias ".worker)))"

// Exponential backoff with jitter for a job j of queue q: base * 2^attempt, capped, minus up to
// jitter (a fraction) of it so that a burst of failures does not come back as a burst.
#define HOPPER_BACKOFF(j, q)                                 \
    "(LEAST(" q ".backoff_cap, " q                           \
    ".backoff_base * pg_catalog.power(2::float8, "           \
    "LEAST(" j ".attempt, 30)::float8)) * (1.0::float8 - " q \
    ".jitter::float8 * pg_catalog.random()))"
