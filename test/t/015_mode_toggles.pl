# A queue whose settings change while it is busy. Six clients push (single jobs, keyed batches,
# packed batches), pull, take, complete-and-pull, cancel and retry, while another changes the
# queue under them:
# concurrency and per-key limits on and off (a limited queue's claims turn its packed rows into
# ordinary rows), a rate limit on and off, pause and resume, max_attempts. Each change reaches the
# other sessions through their remembered queue rows. Whatever the order, every job pushed must
# finish exactly once, and the tables and indexes must check clean. Then a queue dropped and purged
# under the same kind of load.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = race_node('toggles');
$node->safe_psql('app',
	"CREATE EXTENSION amcheck;\n"
	  . "SELECT hopper.queue_create('tog');\n"
	  . "CREATE TABLE pushed (id bigint);\n"
	  . "GRANT ALL ON pushed TO PUBLIC;");

my %scripts = (
	'push' => "INSERT INTO pushed SELECT hopper.queue_push('tog', '{}',\n"
	  . "  concurrency_key => CASE WHEN random() < 0.5 THEN 'k' || (random() * 3)::int END);\n",
	'packed' => "BEGIN;\nSET LOCAL hopper.pack_batches = on;\n"
	  . "INSERT INTO pushed SELECT hopper.queue_push_batch('tog', array_fill('{}'::jsonb, ARRAY[20]));\n"
	  . "COMMIT;\n",
	'keyed-batch' => "INSERT INTO pushed SELECT hopper.queue_push_batch('tog', array_fill('{}'::jsonb, ARRAY[10]),\n"
	  . "  concurrency_keys => array_fill('kb'::text, ARRAY[10]));\n",
	'pull' =>
	  "SELECT count(*) FROM hopper.queue_pull('tog', 5) j WHERE hopper.queue_complete(j.id, j.lease_token);\n",
	# A take on a queue with limits is refused (0A000) while they are on.
	'take' => "DO \$\$ BEGIN PERFORM count(*) FROM hopper.queue_take('tog', 3);\n"
	  . "EXCEPTION WHEN feature_not_supported THEN NULL; END \$\$;\n",
	'complete-pull' => "SELECT coalesce(max(id)::text, 'NULL') AS cid, coalesce(max(lease_token)::text, 'NULL') AS ctok\n"
	  . "  FROM hopper.queue_complete_pull(:cid, :ctok, NULL, 'tog', 1) \\gset\n",
	# Cancels of waiting jobs (a packed one's row is unpacked first), and retries of cancelled ones;
	# another client may have got to the same job first.
	'cancel' => "SELECT count(hopper.queue_cancel(id)) FROM (SELECT id FROM hopper.jobs\n"
	  . "  WHERE queue = 'tog' AND state = 'available' ORDER BY id DESC LIMIT 1) c;\n"
	  . "SELECT count(hopper.queue_cancel(b.ids[b.taken + 1])) FROM (SELECT ids, taken FROM hopper.job_batches\n"
	  . "  WHERE queue = 'tog' ORDER BY first_id DESC LIMIT 1) b;\n",
	'retry' => "DO \$\$ BEGIN\n"
	  . "  PERFORM hopper.queue_retry(id) FROM hopper.job_history\n"
	  . "    WHERE queue = 'tog' AND state = 'cancelled' ORDER BY id DESC LIMIT 1;\n"
	  . "EXCEPTION WHEN object_not_in_prerequisite_state OR no_data_found THEN NULL;\n"
	  . "END \$\$;\n",
	'change' => "\\set r random(1, 8)\n"
	  . "\\if :r = 1\nSELECT hopper.queue_set_concurrency('tog', 10, 2);\n"
	  . "\\elif :r = 2\nSELECT hopper.queue_set_concurrency('tog', NULL, NULL);\n"
	  . "\\elif :r = 3\nSELECT hopper.queue_set_rate_limit('tog', 100000, '1 second');\n"
	  . "\\elif :r = 4\nSELECT hopper.queue_set_rate_limit('tog', NULL, NULL);\n"
	  . "\\elif :r = 5\nSELECT hopper.queue_pause('tog');\n"
	  . "\\elif :r = 6\nSELECT hopper.queue_resume('tog');\n"
	  . "\\elif :r = 7\nSELECT hopper.queue_create('tog', max_attempts => (1 + random() * 5)::int);\n"
	  . "\\else\nSELECT hopper.queue_set_key_limit('tog', 'k1', CASE WHEN random() < 0.5 THEN 1 END);\n"
	  . "\\endif\n");
my %weight = (push => 3, pull => 3, take => 2, 'complete-pull' => 2);

run_scripts($node, 'six clients push, claim and change the queue under each other without an error',
	6, 10, \%scripts, \%weight, 'cid=NULL', 'ctok=NULL');

my $changes = $node->safe_psql('app',
	"SELECT (SELECT count(*) FROM hopper.job_history) || ' ' || "
	  . "(SELECT count(DISTINCT id) FROM pushed) || ' ' || (SELECT count(*) FROM hopper.job_batches)");
note("finished, pushed, packed rows left: $changes");

# Every limit off and the queue running, then drained.
$node->safe_psql('app',
	"SELECT hopper.queue_set_concurrency('tog', NULL, NULL);\n"
	  . "SELECT hopper.queue_set_rate_limit('tog', NULL, NULL);\n"
	  . "SELECT hopper.queue_set_key_limit('tog', 'k1', NULL);\n"
	  . "SELECT hopper.queue_resume('tog');");
is(drain_queues($node, 'app', 'tog'), '0', 'the queue drained once its limits were off');
finished_once($node, 'app', 'tog', 'tog');
amcheck_ok($node, 'after the changes', 1);

# A queue dropped and purged again and again while clients push (packed batches too, some held
# open a moment before they commit), pull, take, cancel, retry and set limits on it again: no call fails, and no job,
# packed row or history row outlives its queue. A push that commits after the drop would leave
# one behind only until the next push makes the queue again, so a checker looks all the time.
my $outlived = join(' OR ',
	map { "EXISTS (SELECT 1 FROM hopper.$_ t WHERE NOT EXISTS "
		  . "(SELECT 1 FROM hopper.queues q WHERE q.name = t.queue))" } qw(jobs job_batches job_history));
my %dropping = (
	'dq-push' => "SELECT hopper.queue_push('dq', '{}', concurrency_key => 'k' || (random() * 3)::int);\n",
	'dq-packed' => "BEGIN;\nSET LOCAL hopper.pack_batches = on;\n"
	  . "SELECT count(*) FROM hopper.queue_push_batch('dq', array_fill('{}'::jsonb, ARRAY[20]));\nCOMMIT;\n",
	'dq-push-held' => "BEGIN;\nSELECT hopper.queue_push('dq', '{}');\n\\sleep 5 ms\nCOMMIT;\n",
	'dq-packed-held' => "BEGIN;\nSET LOCAL hopper.pack_batches = on;\n"
	  . "SELECT count(*) FROM hopper.queue_push_batch('dq', array_fill('{}'::jsonb, ARRAY[20]));\n"
	  . "\\sleep 5 ms\nCOMMIT;\n",
	'dq-cancel' => "DO \$\$ BEGIN PERFORM hopper.queue_cancel(id) FROM hopper.jobs WHERE queue = 'dq' "
	  . "AND state = 'available' LIMIT 1; EXCEPTION WHEN no_data_found THEN NULL; END \$\$;\n",
	'dq-retry' => "DO \$\$ DECLARE i bigint; BEGIN SELECT id INTO i FROM hopper.job_history "
	  . "WHERE queue = 'dq' AND state = 'cancelled' LIMIT 1; IF i IS NOT NULL THEN "
	  . "PERFORM hopper.queue_retry(i); PERFORM pg_sleep(0.005); END IF; EXCEPTION WHEN no_data_found "
	  . "OR object_not_in_prerequisite_state THEN NULL; END \$\$;\n",
	'dq-check' => "DO \$\$ BEGIN IF $outlived THEN RAISE EXCEPTION 'a job outlived its queue'; END IF; "
	  . "END \$\$;\n",
	'dq-pull' =>
	  "SELECT count(*) FROM hopper.queue_pull('dq', 5) j WHERE hopper.queue_complete(j.id, j.lease_token);\n",
	'dq-pull-apart' => "SELECT coalesce(max(id), 0) AS jid, coalesce(max(lease_token), 0) AS jtok "
	  . "FROM hopper.queue_pull('dq', 1) \\gset\nDO \$\$ BEGIN PERFORM hopper.queue_complete(:jid, :jtok) "
	  . "WHERE :jid > 0; EXCEPTION WHEN no_data_found THEN NULL; END \$\$;\n",
	'dq-take' => "DO \$\$ BEGIN PERFORM hopper.queue_take('dq', 3); "
	  . "EXCEPTION WHEN feature_not_supported THEN NULL; END \$\$;\n",
	'dq-limits' => "DO \$\$ BEGIN PERFORM hopper.queue_set_concurrency('dq', 4, 2); "
	  . "PERFORM hopper.queue_set_rate_limit('dq', 2000, '1 second'); "
	  . "PERFORM hopper.queue_set_rate_limit('dq', 500, '1 second', each_key => true); "
	  . "PERFORM hopper.queue_set_key_limit('dq', 'k1', 1); EXCEPTION WHEN no_data_found THEN NULL; END \$\$;\n",
	'dq-drop' => "SELECT hopper.queue_drop('dq');\n\\sleep 20 ms\n",
	'dq-purge' => "DO \$\$ BEGIN PERFORM hopper.queue_purge('dq'); EXCEPTION WHEN no_data_found THEN NULL; END \$\$;\n");
run_scripts($node, 'six clients push, claim, retry, limit, drop and purge one queue without an error', 6, 8,
	\%dropping, { 'dq-push' => 3, 'dq-pull' => 3 });
is($node->safe_psql('app', "SELECT $outlived"), 'f', 'nothing outlives its queue');
amcheck_ok($node, 'after the drops', 1);

$node->stop;
done_testing();
