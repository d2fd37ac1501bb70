#!/usr/bin/env bash
# hopper's performance suite (`make bench`): hopper against the plain-SQL baseline queue and the raw
# pgbench limits, side by side in one run on the project's own cluster. Writes bench/results/REPORT.md
# and the plots under bench/results/, from scratch every time.
#
# Settings (environment):
#   BENCH_QUICK=1            a short pass for development (1 s runs, 1 repetition, small backlogs)
#   BENCH_SECONDS            length of each timed pgbench run (default 3)
#   BENCH_REPS               repetitions of every measurement; the report shows median, min, max (3)
#   BENCH_SCALE_SIZES        backlog sizes for the scaling runs (default "10000 100000 1000000")
#   BENCH_HISTORY            finished jobs put in history for the last scaling run (default 1000000)
#   BENCH_LATENCY_SECONDS    length of each latency run (default 5) at BENCH_LATENCY_RATE jobs/s (1000)
#   BENCH_CHURN_SECONDS      length of the churn run (default 75; autovacuum_naptime scaled to match)
#   BENCH_PRESSURE_SECONDS   length of each pressure run (default 25), at BENCH_PRESSURE_RATE (1000)
#   BENCH_SYNC_OFF=0         skip the synchronous_commit=off pass
#   BENCH_RESCUE_JOBS        expired leases the reaper rescues in the reaper-cost run (default 100000)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

quick=${BENCH_QUICK:-0}
if [ "$quick" = 1 ]; then
    SECS=${BENCH_SECONDS:-1}
    REPS=${BENCH_REPS:-1}
    SCALE_SIZES=${BENCH_SCALE_SIZES:-"10000 100000"}
    HISTORY=${BENCH_HISTORY:-100000}
    LAT_SECS=${BENCH_LATENCY_SECONDS:-2}
    CHURN_SECS=${BENCH_CHURN_SECONDS:-15}
    PRESSURE_SECS=${BENCH_PRESSURE_SECONDS:-8}
else
    SECS=${BENCH_SECONDS:-3}
    REPS=${BENCH_REPS:-3}
    SCALE_SIZES=${BENCH_SCALE_SIZES:-"10000 100000 1000000"}
    HISTORY=${BENCH_HISTORY:-1000000}
    LAT_SECS=${BENCH_LATENCY_SECONDS:-5}
    CHURN_SECS=${BENCH_CHURN_SECONDS:-75}
    PRESSURE_SECS=${BENCH_PRESSURE_SECONDS:-25}
fi
LAT_RATE=${BENCH_LATENCY_RATE:-1000}
PRESSURE_RATE=${BENCH_PRESSURE_RATE:-1000}
RESCUE_JOBS=${BENCH_RESCUE_JOBS:-100000}
SYNC_OFF=${BENCH_SYNC_OFF:-1}
# Drain backlogs: each drain run lasts SECS or until its backlog is empty, whichever comes first
# (a client that finds the queue empty stops), so a backlog larger than a 2-core box drains in SECS
# costs only its preload.
drain_backlog() {  # pull batch size
    local per_sec
    case $1 in 1) per_sec=8000 ;; 10) per_sec=30000 ;; *) per_sec=60000 ;; esac
    echo $((per_sec * SECS))
}

OUT=bench/results
TMP=$OUT/tmp
rm -rf "$TMP"
mkdir -p "$TMP"
chmod 777 "$TMP"
RESULTS=$TMP/results.tsv
: >"$RESULTS"
started_at=$(date -u '+%Y-%m-%d %H:%M:%S UTC')
t_start=$(date +%s)
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
# What other processes use of the CPU before the bench starts anything, sampled over 3 s: the
# load average above still counts the build that `make bench` runs just before. /proc/stat's cpu
# line: user nice system idle iowait irq softirq steal (guest time is inside user).
cpu_sample() { awk '/^cpu / { print $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9, $5 + $6 }' /proc/stat; }
read -r cpu_total0 cpu_idle0 <<<"$(cpu_sample)"
sleep 3
read -r cpu_total1 cpu_idle1 <<<"$(cpu_sample)"
others_busy=$(awk -v t=$((cpu_total1 - cpu_total0)) -v i=$((cpu_idle1 - cpu_idle0)) \
    'BEGIN { printf "%.0f", (t > 0 ? 100 * (t - i) / t : 0) }')

log() { printf '[bench %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
# shellcheck source=bench/fresh_cluster.sh
. bench/fresh_cluster.sh

export HOPPER_CLUSTER=bench
cluster=test/cluster.sh
snapshot_pid=
cleanup() {
    if [ -n "$snapshot_pid" ]; then kill "$snapshot_pid" 2>/dev/null || true; fi
    $cluster stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

log "fresh cluster"
fresh_cluster bench
PGBENCH=$($cluster bindir)/pgbench
[ -x "$PGBENCH" ] || PGBENCH=/usr/lib/postgresql/15/bin/pgbench

log "building the latency driver"
[ -f client/build/libhopper.a ] || make --no-print-directory client >/dev/null
g++ -std=c++17 -O2 -Wall -Wextra -pthread -Iclient/include \
    -I"$(pg_config --includedir 2>/dev/null || echo /usr/include/postgresql)" \
    bench/latency.cpp client/build/libhopper.a -o "$TMP/latency" -lfmt -lpq
CONNINFO="host=$PGHOST port=$PGPORT user=$PGUSER dbname=bench"

q() { psql -XAtq -v ON_ERROR_STOP=1 -c "$1"; }
rec() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$RESULTS"; }
checkpoint() { q "CHECKPOINT" >/dev/null; }

# pgbench LOG CLIENTS SECONDS SCRIPT [pgbench args...]: prints "transactions tps".
pgb() {
    local logf=$1 c=$2 secs=$3 script=$4
    shift 4
    local j=$((c < 2 ? 1 : 2)) length limit path="bench/scripts/$script" a n=""
    # pgbench sends :n as a bind parameter. "LIMIT $1" in the baseline's pull made PostgreSQL
    # settle, after five executions, on a generic plan that hash-joins a sequential scan of the
    # whole queue (and a custom plan costs 0.8 ms of planning each time): a third to a half of
    # the baseline's drain rate lost to the driver. A queue's users write the number in the text,
    # so the script runs with it written in.
    for a in "$@"; do [ "${a#n=}" != "$a" ] && n=${a#n=}; done
    if [ -n "$n" ] && grep -q 'LIMIT :n' "$path"; then
        sed "s/LIMIT :n\b/LIMIT $n/" "$path" >"$TMP/${script%.sql}.n$n.sql"
        path="$TMP/${script%.sql}.n$n.sql"
    fi
    # "t:N" runs N transactions per client instead of a fixed time (bounded by a generous timeout).
    if [ "${secs#t:}" != "$secs" ]; then
        length=(-t "${secs#t:}") limit=$((SECS * 20 + 120))
    else
        length=(-T "$secs") limit=$((secs * 4 + 60))
    fi
    # With -D stop_when_empty=1 a client that finds the queue empty ends itself with a deliberate
    # error ("the queue is empty"), pgbench's only way to stop one client early; other errors count.
    timeout "$limit" "$PGBENCH" -n -M prepared -c "$c" -j "$j" "${length[@]}" \
        -f "$path" -D idle=1000 -D stop_when_empty=0 "$@" >"$logf" 2>&1 || true
    if grep -E 'ERROR|FATAL|error:' "$logf" | grep -vE 'the queue is empty|Run was aborted|aborted in command' |
        grep -q .; then
        echo "pgbench reported errors (see $logf):" >&2
        grep -E 'ERROR|FATAL|error:' "$logf" | grep -v 'the queue is empty' | head -3 >&2 || true
    fi
    local n tps
    n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$logf")
    tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' "$logf")
    echo "${n:-0} ${tps:-0}"
}
# jobs/s from a count of jobs and pgbench's "transactions tps" line.
rate() {  # jobs "transactions tps"
    awk -v jobs="$1" -v nt="$2" 'BEGIN { split(nt, a, " "); if (a[1] > 0 && a[2] > 0) printf "%.0f", jobs / (a[1] / a[2]); else print "nan" }'
}

reset_hopper() { q "TRUNCATE hopper.jobs, hopper.job_history, hopper.job_batches" >/dev/null; }
reset_baseline() { q "TRUNCATE bench.baseline_queue" >/dev/null; }
preload_hopper() {  # queue count [packed]: packed stores the backlog in packed rows
    local chunks=$((($2 + 999) / 1000)) pack=off
    [ "${3:-}" = packed ] && pack=on
    PGOPTIONS="-c hopper.notify=off -c synchronous_commit=off -c hopper.pack_batches=$pack" q "SELECT pg_catalog.count(*) FROM
        pg_catalog.generate_series(0, $chunks - 1) s,
        LATERAL hopper.queue_push_batch('$1', ARRAY(SELECT pg_catalog.jsonb_build_object('n', s * 1000 + g)
                                                    FROM pg_catalog.generate_series(1, 1000) g))" >/dev/null
    q "VACUUM ANALYZE hopper.jobs" >/dev/null
}
preload_baseline() {  # count
    PGOPTIONS='-c synchronous_commit=off' q "INSERT INTO bench.baseline_queue (message)
        SELECT pg_catalog.jsonb_build_object('n', g) FROM pg_catalog.generate_series(1, $1) g" >/dev/null
    q "VACUUM ANALYZE bench.baseline_queue" >/dev/null
}
hopper_completed() { q "SELECT pg_catalog.count(*) FROM hopper.job_history WHERE queue = '$1'"; }
# System "hopk": hopper with the queue's retention at 0, so completions keep no history (as the
# baseline keeps none). Its completions are counted as the jobs that left hopper.jobs.
hopper_left() { q "SELECT pg_catalog.count(*) FROM hopper.jobs WHERE queue = '$1'"; }
keep_history() {  # queue on|off
    local r="7 days"
    [ "$2" = off ] && r=0
    q "SELECT hopper.queue_create('$1', retention => '$r')" >/dev/null
}
baseline_left() { q "SELECT pg_catalog.count(*) FROM bench.baseline_queue"; }

# Samples the wait events of client backends every 50 ms for SECONDS into FILE (background).
sample_waits() {  # seconds file
    # One connection for the whole run, a sample every 50 ms: a new psql and backend per sample
    # took enough of the two cores to slow the repetition being sampled by 8-27%.
    local n=$(($1 * 20)) i
    for ((i = 0; i < n; i++)); do
        echo "SELECT COALESCE(wait_event_type || ':' || wait_event, 'CPU (no wait event)')
            FROM pg_catalog.pg_stat_activity
            WHERE backend_type = 'client backend' AND state = 'active' AND pid <> pg_catalog.pg_backend_pid();"
        echo "SELECT 1 FROM pg_catalog.pg_sleep(0.05) WHERE false;"
    done | psql -XAtq >>"$2" 2>/dev/null || true
}

# ---------------------------------------------------------------------------------------------------
# The workloads. Every one records jobs/s (or tps) as KEY, REP, VALUE in $RESULTS. Repetitions are
# interleaved (rep 1 of everything, then rep 2, ...) so that a noisy moment hits all sides alike.

raw_limits() {  # prefix (PGOPTIONS set by the caller)
    local pfx=$1 rep c s
    for rep in $(seq "$REPS"); do
        for c in 1 4 16; do
            for s in insert update select; do
                q "TRUNCATE bench.raw_insert" >/dev/null
                checkpoint
                r=$(pgb "$TMP/$pfx.raw_$s.c$c.$rep.log" "$c" "$SECS" "raw_$s.sql")
                rec "$pfx.raw.$s.c$c" "$rep" "$(echo "$r" | awk '{printf "%.0f", $2}')"
            done
        done
    done
}

enqueue() {  # prefix configs...: each config is system:mode:clients (system base|hop|hopq)
    local pfx=$1 rep cfg sys mode c r batch
    shift
    for rep in $(seq "$REPS"); do
        for cfg in "$@"; do
            IFS=: read -r sys mode c <<<"$cfg"
            reset_hopper
            reset_baseline
            checkpoint
            local opts=() script
            batch=1
            case $mode in single) ;; *) batch=${mode#b} ;; esac
            case $sys in
                raw) script=raw_insert.sql; q "TRUNCATE bench.raw_insert" >/dev/null ;;
                base) script=base_push.sql; [ "$batch" = 1 ] || script=base_push_batch.sql ;;
                *) script=hop_push.sql; [ "$batch" = 1 ] || script=hop_push_batch.sql ;;
            esac
            [ "$sys" = hopq ] && export PGOPTIONS="${PGOPTIONS:-} -c hopper.notify=off"
            [ "$sys" = hopp ] && export PGOPTIONS="${PGOPTIONS:-} -c hopper.pack_batches=on"
            r=$(pgb "$TMP/$pfx.enq.$sys.$mode.c$c.$rep.log" "$c" "$SECS" "$script" -D q=enq -D batch="$batch")
            [ "$sys" = hopq ] && export PGOPTIONS="${PGOPTIONS% -c hopper.notify=off}"
            [ "$sys" = hopp ] && export PGOPTIONS="${PGOPTIONS% -c hopper.pack_batches=on}"
            rec "$pfx.enq.$sys.$mode.c$c" "$rep" "$(echo "$r" | awk -v b="$batch" '{printf "%.0f", $2 * b}')"
        done
    done
}

drain() {  # prefix configs...: each config is system:script:n (system base|hop|hopq|hopk|hopp)
    local pfx=$1 rep cfg sys script n backlog r done_jobs left queue
    shift
    for rep in $(seq "$REPS"); do
        for cfg in "$@"; do
            IFS=: read -r sys script n <<<"$cfg"
            backlog=$(drain_backlog "$n")
            # Packed backlogs get a queue of their own: a packed push marks its queue, and claims on
            # a marked queue read hopper.job_batches too until the reaper sees it drained and clears
            # the mark. Sharing one queue made every later repetition of the other configs measure
            # the packed claims (reps 2 and 3 ran 20-30% below rep 1 while the baseline held).
            queue=drain
            [ "$sys" = hopp ] && queue=drainp
            reset_hopper
            reset_baseline
            [ "$sys" = hopk ] && keep_history drain off
            case $sys in
                base) preload_baseline "$backlog" ;;
                hopp) preload_hopper "$queue" "$backlog" packed ;;
                *) preload_hopper "$queue" "$backlog" ;;
            esac
            checkpoint
            [ "$sys" = hopq ] && export PGOPTIONS="${PGOPTIONS:-} -c hopper.notify=off"
            r=$(pgb "$TMP/$pfx.drain.$sys.$script.n$n.$rep.log" 4 "$SECS" "$script.sql" -D q="$queue" -D n="$n" \
                -D 'ids={}' -D 'toks={}' -D id=0 -D tok=0 -D stop_when_empty=1)
            [ "$sys" = hopq ] && export PGOPTIONS="${PGOPTIONS% -c hopper.notify=off}"
            if [ "$sys" = base ]; then
                left=$(baseline_left)
                done_jobs=$((backlog - left))
                left=$(q "SELECT pg_catalog.count(*) FROM bench.baseline_queue WHERE status = 'new'")
            elif [ "$sys" = hopk ]; then
                done_jobs=$((backlog - $(hopper_left drain)))
                left=$(q "SELECT pg_catalog.count(*) FROM hopper.jobs WHERE state = 'available'")
                keep_history drain on
            else
                done_jobs=$(hopper_completed "$queue")
                left=$(q "SELECT pg_catalog.count(*) + COALESCE((SELECT pg_catalog.sum(pg_catalog.cardinality(ids) - taken)
                          FROM hopper.job_batches), 0) FROM hopper.jobs WHERE state = 'available'")
            fi
            rec "$pfx.drain.$sys.$script.n$n.left" "$rep" "$left"
            rec "$pfx.drain.$sys.$script.n$n" "$rep" "$(rate "$done_jobs" "$r")"
        done
    done
}

# Concurrency slots: pull + complete (queue_complete_pull, 4 workers) on a backlog of jobs spread over
# 2 concurrency keys, for SECS: without limits, with a key limit of 4 (never binds: 4 workers) and
# with a key limit of 1 (binds: at most 2 of the 4 workers hold a job; the others find nothing and
# sleep :idle). The backlog is larger than a run drains: 8,000 jobs a second ran out in the 13:57
# run of 2026-11-25, and the unlimited row measured the backlog (8,006-8,011 jobs/s).
slots() {
    local rep cfg name r limit backlog=$((16000 * SECS))
    for rep in $(seq "$REPS"); do
        for cfg in none:NULL loose:4 tight:1; do
            IFS=: read -r name limit <<<"$cfg"
            reset_hopper
            q "SELECT hopper.queue_set_concurrency('slots', NULL, $limit)" >/dev/null
            PGOPTIONS='-c hopper.notify=off -c synchronous_commit=off' q "SELECT pg_catalog.count(*) FROM
                pg_catalog.generate_series(0, $((backlog / 1000)) - 1) s,
                LATERAL hopper.queue_push_batch('slots',
                    ARRAY(SELECT pg_catalog.jsonb_build_object('n', s * 1000 + g) FROM pg_catalog.generate_series(1, 1000) g),
                    concurrency_keys => ARRAY(SELECT 'tenant' || (g % 2) FROM pg_catalog.generate_series(1, 1000) g))" \
                >/dev/null
            q "VACUUM ANALYZE hopper.jobs" >/dev/null
            checkpoint
            r=$(pgb "$TMP/slots.$name.$rep.log" 4 "$SECS" hop_complete_pull.sql -D q=slots -D id=0 -D tok=0)
            # The payload names s, so the push runs once per chunk (an uncorrelated LATERAL call
            # would run once and be joined to every chunk). A backlog drained before the time ran
            # out would measure the backlog, not the claim: say so.
            [ "$(q "SELECT pg_catalog.count(*) FROM hopper.jobs WHERE queue = 'slots'")" -gt 0 ] ||
                log "slots.$name: the backlog ran out; raise its size"
            rec "on.slots.$name" "$rep" "$(rate "$(hopper_completed slots)" "$r")"
        done
    done
}

steady() {  # prefix configs...: each config is system:consumer_script (system base|hop|hopq|hopk)
    local pfx=$1 rep cfg sys script r rp done_jobs ppid
    shift
    for rep in $(seq "$REPS"); do
        for cfg in "$@"; do
            IFS=: read -r sys script <<<"$cfg"
            reset_hopper
            reset_baseline
            [ "$sys" = hopk ] && keep_history steady off
            checkpoint
            [ "$sys" = hopq ] && export PGOPTIONS="${PGOPTIONS:-} -c hopper.notify=off"
            local push=hop_push.sql
            [ "$sys" = base ] && push=base_push.sql
            pgb "$TMP/$pfx.steady.$sys.$script.prod.$rep.log" 4 "$SECS" "$push" -D q=steady >"$TMP/prod.out" &
            ppid=$!
            if [ "$rep" = 1 ] && [ "$pfx" = on ]; then sample_waits "$SECS" "$TMP/waits.steady.$sys.$script" & fi
            r=$(pgb "$TMP/$pfx.steady.$sys.$script.cons.$rep.log" 4 "$SECS" "$script.sql" -D q=steady -D n=1 \
                -D id=0 -D tok=0)
            wait "$ppid" || true
            wait || true
            [ "$sys" = hopq ] && export PGOPTIONS="${PGOPTIONS% -c hopper.notify=off}"
            rp=$(cat "$TMP/prod.out")
            if [ "$sys" = base ]; then
                done_jobs=$(($(echo "$rp" | awk '{print $1}') - $(baseline_left)))
            elif [ "$sys" = hopk ]; then
                done_jobs=$(($(echo "$rp" | awk '{print $1}') - $(hopper_left steady)))
                keep_history steady on
            else
                done_jobs=$(hopper_completed steady)
            fi
            rec "$pfx.steady.$sys.$script" "$rep" "$(rate "$done_jobs" "$r")"
            rec "$pfx.steady.$sys.$script.pushed" "$rep" "$(echo "$rp" | awk '{printf "%.0f", $2}')"
        done
    done
}

latency() {  # configs...: each is name:synchronous_commit(on|off):hopper.notify_relay(on|off)
    #              :consumers (listen: LISTEN/NOTIFY; wait: queue_pull's wait, no NOTIFY at all;
    #               worker: one hopper::Worker with 4 threads, as configured by default)
    local rep cfg name sc relay consumers out
    for rep in $(seq "$REPS"); do
        for cfg in "$@"; do
            IFS=: read -r name sc relay consumers <<<"$cfg"
            reset_hopper
            checkpoint
            local notify=on
            [ "$consumers" = wait ] && notify=off
            out=$(PGOPTIONS="-c synchronous_commit=$sc -c hopper.notify_relay=$relay -c hopper.notify=$notify" \
                HOPPER_LATENCY_WAIT=$([ "$consumers" = wait ] && echo on || echo off) \
                HOPPER_LATENCY_RUNTIME=$([ "$consumers" = worker ] && echo worker) \
                timeout $((LAT_SECS * 3 + 60)) \
                "$TMP/latency" "$CONNINFO" lat "$LAT_RATE" "$LAT_SECS" 4 4 "$TMP/lat.$name.$rep" 2>&1) || true
            echo "$out" >"$TMP/lat.$name.$rep.log"
            for k in p50_us p90_us p99_us p999_us max_us rate pushed started late_pushes; do
                rec "lat.$name.$k" "$rep" "$(echo "$out" | tr ' ' '\n' | sed -n "s/^$k=//p" | tail -1)"
            done
        done
    done
}

scaling() {
    local have=0 size rep before r after hist_done=0 label
    reset_hopper
    for size in $SCALE_SIZES $([ "$HISTORY" -gt 0 ] && echo history); do
        if [ "$size" = history ]; then
            log "scaling: + $HISTORY finished jobs in history"
            PGOPTIONS='-c synchronous_commit=off' q "INSERT INTO hopper.job_history (id, queue, state, priority,
                run_at, attempt, max_attempts, created_at, started_at, finished_at, payload)
                SELECT 1000000000000 + g, 'scale', 'completed', 0, pg_catalog.now(), 1, 5, pg_catalog.now(),
                       pg_catalog.now(), pg_catalog.now(), pg_catalog.jsonb_build_object('n', g)
                FROM pg_catalog.generate_series(1, $HISTORY) g" >/dev/null
            q "VACUUM ANALYZE hopper.job_history" >/dev/null
            label="${have}+${HISTORY}h"
        else
            log "scaling: backlog $size"
            [ "$size" -gt "$have" ] && preload_hopper scale $((size - have))
            have=$size
            label=$size
        fi
        q "VACUUM ANALYZE hopper.jobs" >/dev/null
        for rep in $(seq "$REPS"); do
            checkpoint
            before=$(hopper_completed scale)
            scale_io_snapshot >"$TMP/scale.io.before"
            if [ "$rep" = 1 ]; then sample_waits "$SECS" "$TMP/waits.scale.$label" & fi
            r=$(pgb "$TMP/scale.$label.$rep.log" 4 "$SECS" hop_scale.sql -D q=scale -D n=10 -D 'ids={}' -D 'toks={}')
            wait || true
            after=$(hopper_completed scale)
            rec "scale.$label" "$rep" "$(rate $((after - before)) "$r")"
            scale_io_record "$label" "$rep" $((after - before))
        done
        scale_sizes_record "$label"
        echo "$label" >>"$TMP/scale.labels"
    done
}

sizes_sql="SELECT pg_catalog.pg_relation_size('hopper.jobs'), pg_catalog.pg_indexes_size('hopper.jobs'),
    n_live_tup, n_dead_tup FROM pg_catalog.pg_stat_user_tables WHERE relid = 'hopper.jobs'::regclass"

# Churn and pressure are about storage, so hopper runs them with hopper.notify = off: with NOTIFY
# serializing commits (see the report) it could not even take the offered rate on a slow disk.
churn() {
    local PGOPTIONS="${PGOPTIONS:-} -c hopper.notify=off"
    export PGOPTIONS
    reset_hopper
    # The run compresses 30 minutes into CHURN_SECS; autovacuum's cadence is compressed alike.
    CHURN_NAPTIME=$((60 * CHURN_SECS / 1800 > 1 ? 60 * CHURN_SECS / 1800 : 1))
    q "ALTER SYSTEM SET autovacuum_naptime = '${CHURN_NAPTIME}s'" >/dev/null
    q "SELECT pg_catalog.pg_reload_conf()" >/dev/null
    checkpoint
    log "churn: ${CHURN_SECS}s at $PRESSURE_RATE jobs/s offered, autovacuum_naptime ${CHURN_NAPTIME}s"
    pgb "$TMP/churn.prod.log" 4 "$CHURN_SECS" hop_push.sql -D q=churn -R "$PRESSURE_RATE" >/dev/null &
    local ppid=$! t0
    pgb "$TMP/churn.cons.log" 4 "$CHURN_SECS" hop_complete_pull.sql -D q=churn -D id=0 -D tok=0 \
        >"$TMP/churn.cons.out" &
    local cpid=$!
    t0=$(date +%s)
    : >"$TMP/churn.tsv"
    while kill -0 "$cpid" 2>/dev/null; do
        sleep 5
        printf '%s|%s\n' $(($(date +%s) - t0)) "$(q "$sizes_sql")" >>"$TMP/churn.tsv"
    done
    wait "$ppid" || true
    wait "$cpid" || true
    printf '%s|%s\n' $(($(date +%s) - t0)) "$(q "$sizes_sql")" >>"$TMP/churn.tsv"
    q "ALTER SYSTEM RESET autovacuum_naptime" >/dev/null
    q "SELECT pg_catalog.pg_reload_conf()" >/dev/null
    rec churn.completed 1 "$(rate "$(hopper_completed churn)" "$(cat "$TMP/churn.cons.out")")"
}

pressure() {  # system (base|hop) held (0|1)
    local sys=$1 held=$2 name r ppid done_jobs rp push script
    name="$sys.$([ "$held" = 1 ] && echo held || echo clean)"
    local PGOPTIONS="${PGOPTIONS:-} -c hopper.notify=off"
    export PGOPTIONS
    reset_hopper
    reset_baseline
    q "VACUUM hopper.jobs" >/dev/null
    q "VACUUM bench.baseline_queue" >/dev/null
    checkpoint
    push=hop_push.sql script=hop_complete_pull.sql
    [ "$sys" = base ] && push=base_push.sql script=base_pull_complete.sql
    if [ "$held" = 1 ]; then
        # A session that holds one snapshot for the whole run, as a long report query does.
        PGAPPNAME=bench_snapshot psql -XAtq -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT 1" \
            -c "SELECT pg_catalog.pg_sleep($PRESSURE_SECS + 30)" >/dev/null 2>&1 &
        snapshot_pid=$!
        sleep 1
    fi
    log "pressure: $name"
    local before
    before=$(q "$sizes_sql")
    pgb "$TMP/pressure.$name.prod.log" 4 "$PRESSURE_SECS" "$push" -D q=pressure -R "$PRESSURE_RATE" \
        >"$TMP/prod.out" &
    ppid=$!
    r=$(pgb "$TMP/pressure.$name.cons.log" 4 "$PRESSURE_SECS" "$script" -D q=pressure -D n=1 -D id=0 -D tok=0)
    wait "$ppid" || true
    rp=$(cat "$TMP/prod.out")
    if [ "$sys" = base ]; then
        done_jobs=$(($(echo "$rp" | awk '{print $1}') - $(baseline_left)))
        sleep 1
        rec "pressure.$name.sizes" 1 "$(q "SELECT pg_catalog.pg_relation_size('bench.baseline_queue'),
            pg_catalog.pg_indexes_size('bench.baseline_queue'), n_live_tup, n_dead_tup
            FROM pg_catalog.pg_stat_user_tables WHERE relid = 'bench.baseline_queue'::regclass")"
    else
        done_jobs=$(hopper_completed pressure)
        sleep 1
        rec "pressure.$name.sizes" 1 "$(q "$sizes_sql")"
    fi
    rec "pressure.$name" 1 "$(rate "$done_jobs" "$r")"
    rec "pressure.$name.offered" 1 "$(echo "$rp" | awk '{printf "%.0f", $2}')"
    if [ "$held" = 1 ]; then
        q "SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity
           WHERE application_name = 'bench_snapshot'" >/dev/null
        wait "$snapshot_pid" 2>/dev/null || true
        snapshot_pid=
    fi
}

# ---------------------------------------------------------------------------------------------------
# Backlog scaling, what the backlog costs: buffer traffic of hopper.jobs, its indexes and history
# (pg_statio_*: "read" = not found in shared_buffers, fetched from the OS) over each scaling run,
# and the sizes of the hot table and its indexes against shared_buffers.

# Prints "name|counter" lines: blocks read and hit of the hot table's heap, TOAST, each index and
# history; WAL records, full-page images and bytes (the whole cluster: nothing else runs); and the
# autovacuum runs on hopper.jobs.
scale_io_snapshot() {
    q "SELECT 'heap.read', heap_blks_read FROM pg_catalog.pg_statio_user_tables WHERE relid = 'hopper.jobs'::regclass
       UNION ALL SELECT 'heap.hit', heap_blks_hit FROM pg_catalog.pg_statio_user_tables WHERE relid = 'hopper.jobs'::regclass
       UNION ALL SELECT 'toast.read', COALESCE(toast_blks_read, 0) + COALESCE(tidx_blks_read, 0)
        FROM pg_catalog.pg_statio_user_tables WHERE relid = 'hopper.jobs'::regclass
       UNION ALL SELECT 'toast.hit', COALESCE(toast_blks_hit, 0) + COALESCE(tidx_blks_hit, 0)
        FROM pg_catalog.pg_statio_user_tables WHERE relid = 'hopper.jobs'::regclass
       UNION ALL SELECT 'idx.' || indexrelname || '.read', idx_blks_read FROM pg_catalog.pg_statio_user_indexes
        WHERE relid = 'hopper.jobs'::regclass
       UNION ALL SELECT 'idx.' || indexrelname || '.hit', idx_blks_hit FROM pg_catalog.pg_statio_user_indexes
        WHERE relid = 'hopper.jobs'::regclass
       UNION ALL SELECT 'history.read', COALESCE(sum(heap_blks_read + COALESCE(idx_blks_read, 0)), 0)
        FROM pg_catalog.pg_statio_user_tables WHERE schemaname = 'hopper' AND relname LIKE 'job\_history%'
       UNION ALL SELECT 'history.hit', COALESCE(sum(heap_blks_hit + COALESCE(idx_blks_hit, 0)), 0)
        FROM pg_catalog.pg_statio_user_tables WHERE schemaname = 'hopper' AND relname LIKE 'job\_history%'
       UNION ALL SELECT 'wal.records', wal_records FROM pg_catalog.pg_stat_wal
       UNION ALL SELECT 'wal.fpi', wal_fpi FROM pg_catalog.pg_stat_wal
       UNION ALL SELECT 'wal.bytes', wal_bytes::int8 FROM pg_catalog.pg_stat_wal
       UNION ALL SELECT 'autovacuum', autovacuum_count FROM pg_catalog.pg_stat_user_tables
        WHERE relid = 'hopper.jobs'::regclass"
}

# Records the counters' growth since scale_io_snapshot wrote $TMP/scale.io.before, and the job count.
scale_io_record() {  # label rep completed_jobs
    local name delta
    rec "scale.$1.jobs" "$2" "$3"
    scale_io_snapshot | awk -F'|' 'NR == FNR { v[$1] = $2; next } { printf "%s %d\n", $1, $2 - v[$1] }' \
        "$TMP/scale.io.before" - |
        while read -r name delta; do
            rec "scale.$1.io.$name" "$2" "$delta"
        done
}

scale_sizes_record() {  # label
    local name bytes
    q "SELECT 'heap', pg_catalog.pg_relation_size('hopper.jobs')
       UNION ALL SELECT 'toast', COALESCE(pg_catalog.pg_total_relation_size(NULLIF(reltoastrelid, 0)), 0)
        FROM pg_catalog.pg_class WHERE oid = 'hopper.jobs'::regclass
       UNION ALL SELECT 'idx.' || indexrelid::regclass::text, pg_catalog.pg_relation_size(indexrelid)
        FROM pg_catalog.pg_index WHERE indrelid = 'hopper.jobs'::regclass
       UNION ALL SELECT 'history', COALESCE(sum(pg_catalog.pg_total_relation_size(relid)), 0)
        FROM pg_catalog.pg_partition_tree('hopper.job_history')
       UNION ALL SELECT 'dead', n_dead_tup FROM pg_catalog.pg_stat_user_tables WHERE relid = 'hopper.jobs'::regclass
       UNION ALL SELECT 'shared_buffers', pg_catalog.pg_size_bytes(pg_catalog.current_setting('shared_buffers'))" |
        while IFS='|' read -r name bytes; do
            rec "scale.$1.size.${name#idx.hopper.}" 1 "$bytes"
        done
}

# ---------------------------------------------------------------------------------------------------
# The C++ worker runtime (hopper::Worker, client/) as the consumer: bench/worker_consumer.cpp runs it
# with RUNTIME_THREADS handler threads and a no-op handler, built against the client library that
# `make bench` has just built.
RUNTIME_THREADS=4
build_runtime_consumer() {
    [ -f client/build/libhopper.a ] || make --no-print-directory client >/dev/null
    g++ -std=c++17 -O2 -Wall -Wextra -pthread -Iclient/include \
        -I"$(pg_config --includedir 2>/dev/null || echo /usr/include/postgresql)" \
        bench/worker_consumer.cpp client/build/libhopper.a -o "$TMP/worker_consumer" -lfmt -lpq
}

# runtime_field OUTPUT NAME: a "name=value" field of worker_consumer's summary line.
runtime_field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | tail -1; }

# TakeWorker (jobs finished in the worker's transaction) takes this many jobs per transaction in the
# runtime rows (the batch its README example uses), and gathers this long for more when a take finds
# fewer (TakeWorkerOptions::gather, the setting README advises for short jobs in a fast stream).
RUNTIME_TAKE_BATCH=16
RUNTIME_TAKE_GATHER_US=2000

# Drains a preloaded backlog with the runtime until it is empty or SECS have passed: Worker with its
# completions batched (the default) and completing each job on its own (batch_completions off), and
# TakeWorker.
runtime_drain() {  # prefix
    local pfx=$1 rep backlog out mode
    rec runtime.take_batch 1 "$RUNTIME_TAKE_BATCH"
    rec runtime.take_gather_us 1 "$RUNTIME_TAKE_GATHER_US"
    for rep in $(seq "$REPS"); do
        for mode in batched each take; do
            backlog=$(drain_backlog 10)
            reset_hopper
            preload_hopper drain "$backlog"
            checkpoint
            out=$(TAKE_BATCH=$RUNTIME_TAKE_BATCH TAKE_GATHER_US=$RUNTIME_TAKE_GATHER_US timeout $((SECS * 4 + 60)) "$TMP/worker_consumer" "$CONNINFO" \
                drain "$RUNTIME_THREADS" "$SECS" "$backlog" "$mode" 2>"$TMP/$pfx.rt.drain.$mode.$rep.err") || true
            echo "$out" >"$TMP/$pfx.rt.drain.$mode.$rep.log"
            rec "$pfx.rt.drain.$mode" "$rep" "$(runtime_field "$out" rate)"
            rec "$pfx.rt.drain.$mode.left" "$rep" "$(q "SELECT pg_catalog.count(*) FROM hopper.jobs WHERE state = 'available'")"
        done
    done
}

# Steady state: 4 pgbench producers (hop_push.sql, as in steady()) with the runtime consuming:
# Worker with completions batched and each on its own, and TakeWorker. The baseline queue's 4+4 runs
# in the same loop, interleaved, so the ratio compares like with like.
runtime_steady() {  # prefix
    local pfx=$1 rep ppid out rp r done_jobs mode
    for rep in $(seq "$REPS"); do
        reset_hopper
        reset_baseline
        checkpoint
        pgb "$TMP/$pfx.rt.steady.base.prod.$rep.log" 4 "$SECS" base_push.sql -D q=steady >"$TMP/prod.out" &
        ppid=$!
        r=$(pgb "$TMP/$pfx.rt.steady.base.cons.$rep.log" 4 "$SECS" base_pull_complete.sql -D q=steady -D n=1)
        wait "$ppid" || true
        rp=$(cat "$TMP/prod.out")
        done_jobs=$(($(echo "$rp" | awk '{print $1}') - $(baseline_left)))
        rec "$pfx.rt.steady.base" "$rep" "$(rate "$done_jobs" "$r")"

        for mode in batched each take; do
            reset_hopper
            reset_baseline
            checkpoint
            local conninfo=$CONNINFO completions=$mode
            pgb "$TMP/$pfx.rt.steady.$mode.prod.$rep.log" 4 "$SECS" hop_push.sql -D q=steady >"$TMP/prod.out" &
            ppid=$!
            if [ "$rep" = 1 ]; then sample_waits "$SECS" "$TMP/waits.rt.steady.$mode" & fi
            out=$(TAKE_BATCH=$RUNTIME_TAKE_BATCH TAKE_GATHER_US=$RUNTIME_TAKE_GATHER_US timeout $((SECS * 4 + 60)) "$TMP/worker_consumer" "$conninfo" \
                steady "$RUNTIME_THREADS" "$SECS" 0 "$completions" 2>"$TMP/$pfx.rt.steady.$mode.$rep.err") || true
            wait "$ppid" || true
            wait || true
            echo "$out" >"$TMP/$pfx.rt.steady.$mode.$rep.log"
            rec "$pfx.rt.steady.$mode" "$rep" "$(runtime_field "$out" rate)"
            rec "$pfx.rt.steady.$mode.pushed" "$rep" "$(awk '{printf "%.0f", $2}' "$TMP/prod.out")"
        done
    done
}

# ---------------------------------------------------------------------------------------------------
# Reaper cost: RESCUE_JOBS running jobs whose leases have all expired (pushed due an hour ago and
# pulled "half an hour ago" with `at`, under 1-second leases), the reaper held back meanwhile; then
# reaper_start() and the time until the last one is available again, taken from the rescuing
# transactions' timestamps in the jobs' error logs (so the polling here adds nothing).
reaper_rescue() {
    local rep n=$RESCUE_JOBS chunks t0 spans first last rescued
    chunks=$(((n + 999) / 1000))
    # The reaper's settings are the library's GUCs: defined in a session once the library is loaded.
    rec reaper.batch_size 1 "$(psql -XAtq -v ON_ERROR_STOP=1 -c "LOAD 'hopper'" \
        -c "SELECT setting FROM pg_catalog.pg_settings WHERE name = 'hopper.reaper_batch_size'")"
    rec reaper.naptime_ms 1 "$(psql -XAtq -v ON_ERROR_STOP=1 -c "LOAD 'hopper'" \
        -c "SELECT setting FROM pg_catalog.pg_settings WHERE name = 'hopper.reaper_naptime'")"
    rec reaper.jobs 1 "$n"
    for rep in $(seq "$REPS"); do
        reset_hopper
        q "SELECT hopper.reaper_stop()" >/dev/null
        PGOPTIONS='-c hopper.notify=off -c synchronous_commit=off' q "SELECT pg_catalog.count(*) FROM
            pg_catalog.generate_series(0, $chunks - 1) s,
            LATERAL hopper.queue_push_batch('rescue', ARRAY(SELECT pg_catalog.jsonb_build_object('n', s * 1000 + g)
                FROM pg_catalog.generate_series(1, 1000) g), run_at => pg_catalog.now() - interval '1 hour')" >/dev/null
        PGOPTIONS='-c hopper.notify=off -c synchronous_commit=off' q "SELECT pg_catalog.count(*) FROM
            pg_catalog.generate_series(0, $chunks - 1) s,
            LATERAL hopper.queue_pull('rescue', 1000 + 0 * s, lease => '1 second', worker => 'bench-doomed',
                                      at => pg_catalog.now() - interval '30 minutes')" >/dev/null
        q "VACUUM ANALYZE hopper.jobs" >/dev/null
        checkpoint
        t0=$(q "SELECT pg_catalog.date_part('epoch', pg_catalog.clock_timestamp())")
        q "SELECT hopper.reaper_start()" >/dev/null
        local deadline=$(($(date +%s) + 300))
        while [ "$(q "SELECT pg_catalog.count(*) FROM hopper.jobs WHERE queue = 'rescue' AND state = 'running'")" != 0 ] &&
            [ "$(date +%s)" -lt "$deadline" ]; do
            sleep 0.2
        done
        # "first last rescued": seconds after reaper_start() of the first and the last rescue.
        spans=$(q "SELECT pg_catalog.min(e) - $t0, pg_catalog.max(e) - $t0, pg_catalog.count(*) FROM
            (SELECT pg_catalog.date_part('epoch', (errors -> -1 ->> 'at')::timestamptz) e FROM hopper.jobs
             WHERE queue = 'rescue' AND state = 'available' AND lease_token IS NULL
               AND last_error LIKE 'lease expired%') x")
        IFS='|' read -r first last rescued <<<"$spans"
        rec reaper.first_s "$rep" "$first"
        rec reaper.total_s "$rep" "$last"
        rec reaper.rescued "$rep" "$rescued"
        rec reaper.rate "$rep" "$(awk -v n="$rescued" -v t="$last" 'BEGIN { if (t > 0) printf "%.0f", n / t; else print "nan" }')"
    done
    reset_hopper
}

# ---------------------------------------------------------------------------------------------------
log "settings: ${SECS}s runs, $REPS repetitions$([ "$quick" = 1 ] && echo ' (quick mode)')"
q "SELECT name || ' = ' || setting || COALESCE(' ' || unit, '') FROM pg_catalog.pg_settings
   WHERE name IN ('shared_buffers', 'synchronous_commit', 'fsync', 'wal_level', 'max_wal_size',
                  'checkpoint_timeout', 'autovacuum', 'autovacuum_naptime', 'wal_sync_method',
                  'max_connections', 'server_version', 'work_mem', 'full_page_writes')
   ORDER BY name" >"$TMP/settings.txt"

log "raw pgbench limits"
raw_limits on

# raw:single:N repeats the pgbench INSERT limit inside this loop, so the enqueue targets compare
# measurements interleaved with each other.
ENQ=(raw:single:1 base:single:1 hop:single:1 raw:single:4 base:single:4 hop:single:4 hopq:single:4
     base:b100:1 hop:b100:1 base:b100:4 hop:b100:4 hopq:b100:4 hopp:b100:4 base:b1000:1 hop:b1000:1 base:b1000:4
     hop:b1000:4 hopp:b1000:4)
log "enqueue"
enqueue on "${ENQ[@]}"

# Drains push nothing, so hopper.notify changes nothing here: no notify-off rows.
DRAIN=(base:base_pull_complete:1 hop:hop_pull_complete1:1 hop:hop_complete_pull:1 hopk:hop_complete_pull:1
       hop:hop_take:1
       base:base_pull_complete:10 hop:hop_pull_complete_many:10 hop:hop_complete_many_pull:10
       hopk:hop_complete_many_pull:10 hop:hop_take:10
       base:base_pull_complete:100 hop:hop_complete_many_pull:100 hopk:hop_complete_many_pull:100
       hop:hop_take:100 hopk:hop_take:100
       hopp:hop_complete_pull:1 hopp:hop_complete_many_pull:10 hopp:hop_complete_many_pull:100 hopp:hop_take:100)
log "drain"
drain on "${DRAIN[@]}"

log "concurrency slots: pull + complete with a key limit"
slots

STEADY=(base:base_pull_complete hop:hop_pull_complete1 hop:hop_complete_pull hopq:hop_complete_pull
        hopk:hop_complete_pull hop:hop_take)
log "steady state 4 producers + 4 consumers"
steady on "${STEADY[@]}"

log "C++ worker runtime as the consumer ($RUNTIME_THREADS threads)"
build_runtime_consumer
runtime_drain on
runtime_steady on

log "push-to-start latency at $LAT_RATE jobs/s"
latency default:on:on:listen direct:on:off:listen syncoff:off:on:listen wait:on:on:wait runtime:on:on:worker

log "backlog scaling"
scaling

churn

pressure hop 0
pressure hop 1
pressure base 0
pressure base 1

log "reaper cost: rescue $RESCUE_JOBS expired leases"
reaper_rescue

if [ "$SYNC_OFF" = 1 ]; then
    log "synchronous_commit = off pass"
    export PGOPTIONS="-c synchronous_commit=off"
    enqueue off raw:single:4 base:single:4 hop:single:4 hopq:single:4
    drain off base:base_pull_complete:1 hop:hop_complete_pull:1 hop:hop_take:1
    steady off base:base_pull_complete hop:hop_complete_pull hop:hop_take
    unset PGOPTIONS
fi

t_end=$(date +%s)
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
log "writing the report"
BENCH_STARTED="$started_at" BENCH_ELAPSED=$((t_end - t_start)) BENCH_LOAD_START="$load_start" \
    BENCH_OTHERS_BUSY="$others_busy" \
    BENCH_LOAD_END="$load_end" BENCH_SECS=$SECS BENCH_REPS_USED=$REPS BENCH_QUICK_USED=$quick \
    BENCH_LAT_RATE=$LAT_RATE BENCH_LAT_SECS=$LAT_SECS BENCH_CHURN_SECS=$CHURN_SECS \
    BENCH_PRESSURE_SECS=$PRESSURE_SECS BENCH_CHURN_NAPTIME=${CHURN_NAPTIME:-60} BENCH_PRESSURE_RATE=$PRESSURE_RATE BENCH_SYNC_OFF_USED=$SYNC_OFF \
    bench/report.sh "$TMP" "$OUT"
log "done in $((t_end - t_start)) s: $OUT/REPORT.md"
