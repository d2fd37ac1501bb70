# Moving a live queue to another server by logical replication, as an upgrade to a new major
# version or new hardware does. The publisher's pushes, claims and completions go through the table
# and index access methods; logical decoding must see every change they make. Six clients run every
# write path while a subscriber follows; it must hold the same rows. Then the switch-over of the
# README: the subscription dropped, the sequences (which logical replication does not carry) set
# past what the publisher handed out, and the subscriber drains what is left: every job pushed on
# the publisher finishes exactly once, and no token is handed out twice.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $tables = 'hopper.queues, hopper.jobs, hopper.job_history, hopper.job_batches, '
  . 'hopper.queue_key_limits, hopper.rate_limits, hopper.schedules, public.pushed';

my $old = PostgreSQL::Test::Cluster->new('old');
$old->init(allows_streaming => 'logical');
$old->append_conf('postgresql.conf', "hopper.reaper_prune_interval = '1s'\n");
$old->start;
my $new = PostgreSQL::Test::Cluster->new('new');
$new->init;
$new->start;
for my $node ($old, $new)
{
	$node->safe_psql('postgres', 'CREATE DATABASE app');
	$node->safe_psql('app',
		"CREATE EXTENSION hopper;\n"
		  . "CREATE EXTENSION amcheck;\n"
		  . "CREATE TABLE pushed (id bigint PRIMARY KEY);\n"
		  . "GRANT ALL ON pushed TO PUBLIC;");
}
$old->safe_psql('app',
	"SELECT hopper.queue_create('mix', max_attempts => 3, backoff_base => '10 ms', backoff_cap => '50 ms');\n"
	  . "SELECT hopper.queue_create('rated');\n"
	  . "SELECT hopper.queue_set_rate_limit('rated', 100000, '1 second');\n"
	  . "SELECT hopper.queue_set_rate_limit('rated', 100000, '1 second', each_key => true);\n"
	  . "SELECT hopper.queue_set_concurrency('rated', 50, 5);\n"
	  . "SELECT hopper.queue_set_key_limit('rated', 'k0', 2);\n"
	  . "SELECT hopper.queue_create('gone', retention => '1 second');\n"
	  . "SELECT hopper.queue_schedule('tick', '* * * * *', 'ticks');\n"
	  . "SELECT hopper.queue_create('pausing');\n"
	  . "SELECT count(*) FROM hopper.queue_push_batch('pausing', array_fill('{}'::jsonb, ARRAY[5]));\n"
	  . "CREATE PUBLICATION queue_move FOR TABLE $tables WITH (publish_via_partition_root = true);");
# On the new server nothing of hopper's runs until the switch-over: its reaper would rescue and
# prune on its own.
$new->safe_psql('app', 'SELECT hopper.reaper_stop()');
$new->safe_psql('app',
	"CREATE SUBSCRIPTION queue_move CONNECTION '" . $old->connstr . " dbname=app' PUBLICATION queue_move");
$new->poll_query_until('app',
	"SELECT count(*) = 0 FROM pg_subscription_rel WHERE srsubstate NOT IN ('r', 's')")
  or die 'the tables did not finish their initial copy';
$old->wait_for_catchup('queue_move');

my %scripts = (
	'push' => "INSERT INTO pushed SELECT hopper.queue_push('mix', '{}', priority => (random() * 3)::int);\n",
	'push-batch' => "INSERT INTO pushed SELECT hopper.queue_push_batch('mix', array_fill('{}'::jsonb, ARRAY[10]));\n",
	'push-packed' => "BEGIN;\nSET LOCAL hopper.pack_batches = on;\n"
	  . "INSERT INTO pushed SELECT hopper.queue_push_batch('mix', array_fill('{}'::jsonb, ARRAY[20]));\nCOMMIT;\n",
	'push-rated' => "INSERT INTO pushed SELECT hopper.queue_push('rated', '{}',\n"
	  . "  concurrency_key => 'k' || (random() * 4)::int);\n",
	# A queue whose history is pruned as it goes: its jobs are not counted at the end.
	'push-gone' => "SELECT count(*) FROM hopper.queue_push_batch('gone', array_fill('{}'::jsonb, ARRAY[5]));\n",
	'pull' => "SELECT count(*) FROM hopper.queue_pull('mix', 5) j\n"
	  . "  WHERE hopper.queue_heartbeat(j.id, j.lease_token) AND hopper.queue_complete(j.id, j.lease_token);\n",
	'fail' => "SELECT count(*) FROM hopper.queue_pull('mix', 2) j\n"
	  . "  WHERE hopper.queue_fail(j.id, j.lease_token, 'boom', retry_in => '0') IS NOT NULL;\n",
	'abandon' => "SELECT count(*) FROM hopper.queue_pull('mix', 1, lease => '10 ms');\n",
	'take' => "SELECT count(*) FROM hopper.queue_take('mix', 4);\n",
	'retry' => "DO \$\$ BEGIN\n"
	  . "  PERFORM hopper.queue_retry(id) FROM hopper.job_history\n"
	  . "    WHERE queue = 'mix' AND state = 'dead' ORDER BY id DESC LIMIT 1;\n"
	  . "EXCEPTION WHEN object_not_in_prerequisite_state OR no_data_found THEN NULL;\n"
	  . "END \$\$;\n",
	'pull-rated' =>
	  "SELECT count(*) FROM hopper.queue_pull('rated', 3) j WHERE hopper.queue_complete(j.id, j.lease_token);\n",
	'take-gone' => "SELECT count(*) FROM hopper.queue_take('gone', 10);\n",
	'ticks' => "SELECT hopper.schedule_run_due(now() + make_interval(mins => (random() * 100000)::int));\n");

run_scripts($old, 'six clients push, claim, complete, fail, retry and take on the old server without an error',
	6, 6, \%scripts, {});

# The reaper prunes the history of the queue that keeps a second of it, under the publication
# (a DELETE of a published table), and nothing on the old server failed for want of a replica
# identity.
ok( defined wait_until($old, 'app',
		"SELECT count(*) = 0 FROM hopper.job_history WHERE queue = 'gone' "
		  . "AND finished_at < now() - interval '3 seconds'"),
	'retention pruned the history on the old server');
unlike(slurp_file($old->logfile), qr/replica identity/, 'no write on the old server lacked a replica identity');

# What each replicated table holds, compared with nothing writing on the old server (its reaper
# stopped: it prunes history every second).
my @tables = split /, /, $tables;
my $digest_sql = rows_digest(@tables);
$old->safe_psql('app', 'SELECT hopper.reaper_stop()');
$old->wait_for_catchup('queue_move');
my $theirs = $new->safe_psql('app', $digest_sql);
is($theirs, $old->safe_psql('app', $digest_sql), 'the new server holds the rows of the old one');
like($theirs, qr/^hopper\.jobs\|[1-9]/m, 'with jobs still waiting');
like($theirs, qr/^hopper\.job_batches\|[1-9]/m, 'and packed rows');
amcheck_ok($new, 'the new server', 1);

# A session on the new server remembers the queue settings its claims read. Changes that the
# subscription applies (session_replication_role = replica, no statement triggers) must reach it
# as local ones do: a pause on the old server stops its claims, the resume restarts them.
my $pausing = "SELECT count(*) FROM hopper.queue_pull('pausing')";
my $reader = start_session($new, 'app');
is(session_query($reader, $pausing), '1', 'a session on the new server claims from a queue');
$old->safe_psql('app', "SELECT hopper.queue_pause('pausing')");
$old->wait_for_catchup('queue_move');
is(session_query($reader, $pausing), '0', 'a pause replicated from the old server stops its claims');
$old->safe_psql('app', "SELECT hopper.queue_resume('pausing')");
$old->wait_for_catchup('queue_move');
is(session_query($reader, $pausing), '1', 'and the replicated resume restarts them');
$reader->{run}->finish;

# The switch-over. The old server stops taking writes (here: its clients are done), the
# subscription goes, and each sequence moves past everything the old server handed out.
my $highest = $old->safe_psql('app',
	"SELECT last_value FROM hopper.job_id_seq UNION ALL SELECT last_value FROM hopper.lease_token_seq");
my ($last_id, $last_token) = split /\n/, $highest;
$new->safe_psql('app', 'DROP SUBSCRIPTION queue_move');
$new->safe_psql('app',
	"SELECT setval('hopper.job_id_seq', $last_id);\n"
	  . "SELECT setval('hopper.lease_token_seq', $last_token);\n"
	  . "SELECT hopper.reaper_start();");
$old->stop;

# A job pushed and claimed on the new server gets an id and a token the old one never handed out.
is( $new->safe_psql('app',
		"INSERT INTO pushed SELECT hopper.queue_push('mix', '{}', priority => -1) RETURNING id > $last_id"),
	't', 'a push on the new server gets a new id');
is( $new->safe_psql('app',
		"SELECT count(*) FILTER (WHERE lease_token > $last_token) || ' of ' || count(*) "
		  . "FROM hopper.queue_pull('mix', 5) j WHERE hopper.queue_complete(j.id, j.lease_token)"),
	'5 of 5', 'and its claims new tokens');

# Jobs that were running on the old server are rescued once their leases expire: the drain runs
# two hours ahead (`at`).
$new->safe_psql('app', "SELECT hopper.queue_set_concurrency('rated', NULL, NULL)");
is(drain_queues($new, 'app', 'mix', 'rated', 'gone'), '0', 'the new server drained every job');
finished_once($new, 'app', 'pushed on either server', 'mix', 'rated');
amcheck_ok($new, 'the new server after the drain', 1);

$new->stop;
done_testing();
