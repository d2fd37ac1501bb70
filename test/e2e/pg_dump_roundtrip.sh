#!/usr/bin/env bash
# A backup keeps the queue: pg_dump of a database with hopper, restored into a new database, has the
# same queues, live jobs (packed ones too), rate limits and schedules, and the id sequence continues
# after the restored ids.
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
SQL
before=$(psql -X -At -d "$src" -c "SELECT available || '/' || scheduled FROM hopper.queue_stats('backup')")

pg_dump -d "$src" -Fc -f "$dump"
pg_restore -d "$dst" --exit-on-error "$dump"

after=$(psql -X -At -d "$dst" -c "SELECT available || '/' || scheduled FROM hopper.queue_stats('backup')")
max_attempts=$(psql -X -At -d "$dst" -c "SELECT max_attempts FROM hopper.job_status(hopper.queue_push('backup', '{}'))")
new_id=$(psql -X -At -d "$dst" -c "SELECT hopper.queue_push('backup', '{\"n\": 3}')")
schedule=$(psql -X -At -d "$dst" -c "SELECT name || ' ' || cron || ' ' || queue || ' ' || payload FROM hopper.queue_schedules()")
rates=$(psql -X -At -d "$dst" -c "SELECT string_agg(coalesce(concurrency_key, '*') || ':' || max_claims, ',' ORDER BY max_claims) FROM hopper.rate_limits WHERE queue = 'backup'")
# Packed jobs come back packed, and the restored queue's claims find them.
packed=$(psql -X -At -d "$dst" -c "SELECT string_agg(payload->>'p', ',' ORDER BY id) FROM hopper.queue_pull('backup-packed', 5)")
echo "before=$before after=$after max_attempts=$max_attempts new_id=$new_id schedule=$schedule packed=$packed rates=$rates"
[ "$rates" = "tenant-1:10,*:20" ] && [ "$before" = "1/1" ] && [ "$after" = "1/1" ] && [ "$max_attempts" = 7 ] && [ "$new_id" -gt 5 ] &&
    [ "$schedule" = 'backup-nightly 30 2 * * * backup {"n": 9}' ] && [ "$packed" = "1,2,3" ]
