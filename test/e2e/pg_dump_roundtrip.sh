#!/usr/bin/env bash
# A backup keeps the queue: pg_dump of a database with hopper, restored into a new database, has the
# same queues, live jobs (packed ones too), rate limits and schedules, and the id sequence continues
# after the restored ids. The restore runs without an error although the history has partitions
# made after the install and rows in them and in the default partition; the history itself is not
# in the dump, and README's \copy recipe carries it over, read in the dump's snapshot.
set -euo pipefail
src=hopper_e2e_dump_src
dst=hopper_e2e_dump_dst
dump="${TMPDIR:-/tmp}/hopper_dump.$$"
psql -X -q -v ON_ERROR_STOP=1 -d postgres -c "DROP DATABASE IF EXISTS $src" -c "DROP DATABASE IF EXISTS $dst" \
    -c "CREATE DATABASE $src" -c "CREATE DATABASE $dst"
cleanup() {
    rm -f "$dump"
    psql -X -q -d postgres -c "DROP DATABASE IF EXISTS $src" -c "DROP DATABASE IF EXISTS $dst" >/dev/null 2>&1 || true
}
trap cleanup EXIT

psql -X -q -v ON_ERROR_STOP=1 -d "$src" <<'SQL'
CREATE EXTENSION hopper;
SELECT hopper.queue_create('backup', max_attempts => 7);
SELECT hopper.queue_push('backup', '{"n": 1}');
SELECT hopper.queue_push('backup', '{"n": 2}', run_at => now() + interval '1 day');
SELECT hopper.queue_schedule('backup-nightly', '30 2 * * *', 'backup', '{"n": 9}');
SELECT hopper.queue_set_rate_limit('backup', 10, '1 minute', concurrency_key => 'tenant-1');
SELECT hopper.queue_set_rate_limit('backup', 20, '1 minute');
SET hopper.pack_batches = on;
SELECT count(*) FROM hopper.queue_push_batch('backup-packed', ARRAY['{"p": 1}', '{"p": 2}', '{"p": 3}']::jsonb[]);
RESET hopper.pack_batches;
-- Finished jobs: in today's partition, in one made after the install (40 days ahead), and in the
-- default partition (no partition for that day yet).
SELECT hopper.queue_create('done-jobs');
SELECT hopper.ensure_history_partitions(40);
SELECT hopper.queue_push('done-jobs', '{}');
SELECT count(*) FROM hopper.queue_pull('done-jobs', 1) j WHERE hopper.queue_complete(j.id, j.lease_token);
-- Completions stamp the real time: rows of other days are written as a restore of old history
-- would write them.
INSERT INTO hopper.job_history (id, queue, state, priority, run_at, attempt, max_attempts,
    created_at, finished_at, payload)
SELECT -d, 'done-jobs', 'completed', 0, now(), 1, 5, now(), now() + d * interval '1 day', '{}'
FROM (VALUES (40), (60)) v(d);
SQL
history=$(psql -X -At -d "$src" -c "SELECT string_agg(tableoid::regclass::text, ',' ORDER BY finished_at) FROM hopper.job_history")
case "$history" in
*_p2*,*_p2*,hopper.job_history_default) ;;
*) echo "history not set up as meant: $history" >&2; exit 1 ;;
esac
before=$(psql -X -At -d "$src" -c "SELECT available || '/' || scheduled FROM hopper.queue_stats('backup')")

# README's recipe: the dump and the history's export in one snapshot. The job that finishes in
# between is live in the dump and so must not be in the history exported.
coproc OLD { psql -X -At -q -v ON_ERROR_STOP=1 -d "$src"; }
echo "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT pg_export_snapshot();" >&"${OLD[1]}"
read -r snapshot <&"${OLD[0]}"
pg_dump -d "$src" -Fc --snapshot="$snapshot" -f "$dump"
finished_between=$(psql -X -At -d "$src" -c "SELECT j.id FROM hopper.queue_pull('backup', 1) j WHERE hopper.queue_complete(j.id, j.lease_token)")
echo "\copy (SELECT * FROM hopper.job_history) TO '$dump.history' CSV" >&"${OLD[1]}"
echo "COMMIT;" >&"${OLD[1]}"
exec {OLD[1]}>&-
wait "$OLD_PID"
pg_restore -d "$dst" --exit-on-error "$dump"

after=$(psql -X -At -d "$dst" -c "SELECT available || '/' || scheduled FROM hopper.queue_stats('backup')")
max_attempts=$(psql -X -At -d "$dst" -c "SELECT max_attempts FROM hopper.job_status(hopper.queue_push('backup', '{}'))")
new_id=$(psql -X -At -d "$dst" -c "SELECT hopper.queue_push('backup', '{\"n\": 3}')")
schedule=$(psql -X -At -d "$dst" -c "SELECT name || ' ' || cron || ' ' || queue || ' ' || payload FROM hopper.queue_schedules()")
rates=$(psql -X -At -d "$dst" -c "SELECT string_agg(coalesce(concurrency_key, '*') || ':' || max_claims, ',' ORDER BY max_claims) FROM hopper.rate_limits WHERE queue = 'backup'")
# Packed jobs come back packed, and the restored queue's claims find them.
packed=$(psql -X -At -d "$dst" -c "SELECT string_agg(payload->>'p', ',' ORDER BY id) FROM hopper.queue_pull('backup-packed', 5)")
echo "before=$before after=$after max_attempts=$max_attempts new_id=$new_id schedule=$schedule packed=$packed rates=$rates"
# The history is not in the dump; the \copy recipe brings it over, and its jobs are known again.
restored=$(psql -X -At -d "$dst" -c "SELECT count(*) FROM hopper.job_history")
psql -X -q -v ON_ERROR_STOP=1 -d "$dst" -c "\\copy hopper.job_history FROM '$dump.history' CSV"
carried=$(psql -X -At -d "$dst" -c "SELECT count(*) FILTER (WHERE (SELECT state FROM hopper.job_status(h.id)) = 'completed') FROM hopper.job_history h WHERE queue = 'done-jobs'")
between=$(psql -X -At -d "$dst" -c "SELECT state || ' ' || (SELECT count(*) FROM hopper.job_history WHERE id = $finished_between) FROM hopper.job_status($finished_between)")
rm -f "$dump.history"
echo "history: $restored in the dump, $carried carried over; job $finished_between finished after the dump's snapshot: $between"
[ "$restored" = 0 ] && [ "$carried" = 3 ] && [ "$between" = "available 0" ] &&
[ "$rates" = "tenant-1:10,*:20" ] && [ "$before" = "1/1" ] && [ "$after" = "1/1" ] && [ "$max_attempts" = 7 ] && [ "$new_id" -gt 5 ] &&
    [ "$schedule" = 'backup-nightly 30 2 * * * backup {"n": 9}' ] && [ "$packed" = "1,2,3" ]
