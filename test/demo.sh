#!/usr/bin/env bash
# make demo: a local cluster, the extension, one job pushed, pulled and completed.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cluster="$repo/test/cluster.sh"
$cluster start
eval "$($cluster env)"
export PGHOST PGPORT PGUSER
psql -X -q -v ON_ERROR_STOP=1 -d postgres <<'SQL'
\echo '== hopper demo: a round trip through the queue =='
CREATE EXTENSION IF NOT EXISTS hopper;
SELECT hopper.queue_push('demo', '{"video_id": 42, "path": "/uploads/42.mp4"}', kind => 'transcode') AS job_id \gset
\echo pushed job :job_id
SELECT id, kind, attempt, lease_token FROM hopper.queue_pull('demo', 1, worker => 'demo-worker') \gset pulled_
\echo pulled job :pulled_id (attempt :pulled_attempt, lease token :pulled_lease_token)
SELECT hopper.queue_complete(:pulled_id, :pulled_lease_token, '{"ok": true}') AS completed \gset
\echo completed: :completed
SELECT id, queue, kind, state, attempt, result FROM hopper.job_status(:job_id);
SELECT * FROM hopper.queue_stats('demo');
SQL
echo "The cluster keeps running: $($cluster status). Stop it with: test/cluster.sh stop"
