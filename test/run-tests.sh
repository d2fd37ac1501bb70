#!/usr/bin/env bash
# Runs every suite against the project's own cluster and prints one countable summary.
# Suites are found by what exists: sql/ (pg_regress), test/isolation/specs (isolationtester),
# test/t (TAP, clusters of their own), client/build (ctest: GoogleTest and CLI tests), test/e2e/*.sh.
# Exits non-zero if any suite fails. HOPPER_SUITES="pg_regress isolation" (names as printed) runs
# only those suites, for a quicker loop while working on one area.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
cluster=test/cluster.sh
export HOPPER_CLUSTER=test
PGXS_DIR=$(dirname "$(/usr/lib/postgresql/15/bin/pg_config --pgxs)")/..
SYS_BINDIR=$(/usr/lib/postgresql/15/bin/pg_config --bindir)
RUN_DIR=$($cluster instancedir)
mkdir -p "$RUN_DIR"
OUT="$RUN_DIR/output"
rm -rf "$OUT"
mkdir -p "$OUT"
chmod 777 "$OUT"

total_pass=0
total_fail=0
failed_suites=()
wanted() { [ -z "${HOPPER_SUITES:-}" ] || [[ " $HOPPER_SUITES " == *" $1 "* ]]; }
note() { printf '\n===== %s =====\n' "$*"; }
count() {  # suite passed failed
    total_pass=$((total_pass + $2))
    total_fail=$((total_fail + $3))
    [ "$3" -eq 0 ] || failed_suites+=("$1")
    printf -- '--- %s: %d passed, %d failed\n' "$1" "$2" "$3"
}

$cluster destroy >/dev/null 2>&1 || true
$cluster start || { echo "could not start the test cluster" >&2; exit 1; }
trap '$cluster stop >/dev/null 2>&1 || true' EXIT
eval "$($cluster env)"
export PGHOST PGPORT PGUSER

# pg_regress and isolation tests: one database each, the extension created by the runner.
pg_regress_counts() {  # log suite
    local log=$1 suite=$2 all failed
    all=$(grep -Eo 'All [0-9]+ tests passed' "$log" | grep -Eo '[0-9]+' || true)
    if [ -n "$all" ]; then count "$suite" "$all" 0; return; fi
    failed=$(grep -Eo '[0-9]+ of [0-9]+ tests failed' "$log" | head -1)
    if [ -n "$failed" ]; then
        local f t
        f=$(echo "$failed" | awk '{print $1}')
        t=$(echo "$failed" | awk '{print $3}')
        count "$suite" $((t - f)) "$f"
    else
        count "$suite" 0 1
    fi
}

if wanted pg_regress && ls sql/*.sql >/dev/null 2>&1; then
    note "pg_regress"
    tests=$(ls sql/*.sql | xargs -n1 basename | sed 's/\.sql$//')
    "$PGXS_DIR/test/regress/pg_regress" --inputdir=. --outputdir="$OUT/regress" \
        --bindir="$SYS_BINDIR" --dbname=hopper_regress --load-extension=hopper \
        --host="$PGHOST" --port="$PGPORT" --user=postgres $tests 2>&1 | tee "$OUT/regress.log"
    [ -f "$OUT/regress/regression.diffs" ] && cat "$OUT/regress/regression.diffs"
    pg_regress_counts "$OUT/regress.log" pg_regress
fi

if wanted isolation && ls test/isolation/specs/*.spec >/dev/null 2>&1; then
    note "isolation"
    specs=$(ls test/isolation/specs/*.spec | xargs -n1 basename | sed 's/\.spec$//')
    "$PGXS_DIR/test/isolation/pg_isolation_regress" --inputdir=test/isolation \
        --outputdir="$OUT/isolation" --bindir="$SYS_BINDIR" --dbname=hopper_isolation \
        --load-extension=hopper --host="$PGHOST" --port="$PGPORT" --user=postgres $specs 2>&1 |
        tee "$OUT/isolation.log"
    [ -f "$OUT/isolation/regression.diffs" ] && cat "$OUT/isolation/regression.diffs"
    pg_regress_counts "$OUT/isolation.log" isolation
fi

# GoogleTest and CLI tests, registered with CTest by client/CMakeLists.txt.
if wanted ctest && [ -f client/build/CTestTestfile.cmake ]; then
    note "ctest"
    HOPPER_TEST_CLUSTER="$repo/$cluster" ctest --test-dir client/build --output-on-failure \
        --timeout 600 2>&1 | tee "$OUT/ctest.log"
    line=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$OUT/ctest.log" | tail -1)
    if [ -n "$line" ]; then
        f=$(echo "$line" | sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\1/')
        t=$(echo "$line" | sed -E 's/.* ([0-9]+) tests failed out of ([0-9]+).*/\2/')
        count ctest $((t - f)) "$f"
    else
        count ctest 0 1
    fi
fi

# End-to-end scripts: each exits 0 on success.
if wanted e2e && ls test/e2e/*.sh >/dev/null 2>&1; then
    note "e2e"
    p=0 f=0
    for t in test/e2e/*.sh; do
        if bash "$t" >"$OUT/$(basename "$t").log" 2>&1; then
            echo "ok   $t"; p=$((p + 1))
        else
            echo "FAIL $t"; tail -n 40 "$OUT/$(basename "$t").log"; f=$((f + 1))
        fi
    done
    count e2e "$p" "$f"
fi

# TAP tests start clusters of their own (PostgreSQL::Test::Cluster) from the staged server.
if wanted TAP && ls test/t/*.pl >/dev/null 2>&1; then
    note "TAP"
    $cluster stop >/dev/null 2>&1 || true
    stage_bindir=$($cluster bindir)
    tap_tmp="$RUN_DIR/tmp_check"
    rm -rf "$tap_tmp"
    mkdir -p "$tap_tmp"
    chmod 777 "$tap_tmp"
    tap_env=(PATH="$stage_bindir:$PATH" PERL5LIB="$PGXS_DIR/test/perl"
        PG_REGRESS="$PGXS_DIR/test/regress/pg_regress" TESTDIR="$tap_tmp" PGXS_DIR="$PGXS_DIR"
        HOPPER_REPO="$repo")
    if [ "$(id -u)" -eq 0 ]; then
        # initdb refuses root: run the TAP suite as postgres.
        runuser -u postgres -- env "${tap_env[@]}" prove -v test/t/*.pl 2>&1 | tee "$OUT/tap.log"
    else
        env "${tap_env[@]}" prove -v test/t/*.pl 2>&1 | tee "$OUT/tap.log"
    fi
    tests=$(grep -Eo 'Tests=[0-9]+' "$OUT/tap.log" | grep -Eo '[0-9]+' | tail -1)
    bad=$(grep -Eo '^not ok' "$OUT/tap.log" | wc -l)
    if grep -q '^Result: PASS' "$OUT/tap.log"; then
        count TAP "${tests:-0}" 0
    else
        count TAP $(( ${tests:-0} - bad )) $(( bad > 0 ? bad : 1 ))
    fi
fi

echo
if [ ${#failed_suites[@]} -gt 0 ]; then
    echo "FAILED suites: ${failed_suites[*]} (logs in $OUT)"
fi
echo "${total_pass} passed, ${total_fail} failed"
[ "$total_fail" -eq 0 ]
