# The reaper keeps working while the synchronous standby is down. Its writes (rescues, schedule
# pushes, prunes) are safe to lose in a failover and to do again, so it does not wait for a standby
# to confirm them. Before, its first such commit waited for the standby without limit: expired
# leases stayed running, due schedules pushed nothing, and the wake-ups of pushes committed with
# synchronous_commit = local were never relayed.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('sync_standby_down');
# Synchronous replication needs WAL senders.
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', "hopper.reaper_naptime = '100ms'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION hopper');
my $id = $node->safe_psql('app', "SELECT hopper.queue_push('lost', '{}')");
$node->safe_psql('app', "SELECT count(*) FROM hopper.queue_pull('lost', 1, lease => '2 seconds', worker => 'gone')");
ok(defined reaper_runs($node, 'app'), 'the reaper runs');

# The only synchronous standby is one that never connects. From now on every write of the test is
# committed with synchronous_commit = local.
my $local = 'SET synchronous_commit = local; ';
$node->append_conf('postgresql.conf', "synchronous_standby_names = 'nobody'\n");
$node->reload;
my $waits = start_session($node, 'app');
session_send($waits, "CREATE TABLE waits_for_standby ()");
ok( defined wait_until($node, 'app',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep' "
		  . "AND query LIKE 'CREATE TABLE waits_for_standby%'"),
	'a commit with synchronous_commit = on waits for the standby');

# An expired lease is rescued.
ok( defined wait_until($node, 'app',
		"SELECT state <> 'running' FROM hopper.job_status($id)", 10),
	'the expired lease is rescued');
like($node->safe_psql('app', "SELECT last_error FROM hopper.job_status($id)"),
	qr/lease expired \(worker gone\)/, 'as an expired lease');

# A due schedule pushes its job.
$node->safe_psql('app',
	$local
	  . "SELECT hopper.queue_schedule('tick', '* * * * *', 'ticks');\n"
	  . "UPDATE hopper.schedules SET next_run_at = now() - interval '1 second' WHERE name = 'tick';");
ok( defined wait_until($node, 'app',
		"SELECT count(*) = 1 FROM hopper.jobs WHERE queue = 'ticks'", 10),
	'a due schedule pushes its job');

# A push committed locally wakes a LISTENing worker through the reaper's relay.
my $listener = start_session($node, 'app');
session_query($listener, 'LISTEN "hopper:wake"');
$node->safe_psql('app', $local . "SELECT hopper.queue_push('wake', '{}')");
my ($waited) = wait_notification($listener, 'hopper:wake', 10);
ok(defined $waited, 'a push committed with synchronous_commit = local wakes its listener');
my ($reaper) = split /\|/, reaper_of($node, 'app');
is( $node->safe_psql('app',
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $reaper AND wait_event = 'SyncRep'"),
	'0', 'the reaper does not wait for the standby');

# reaper_stop() returns at once.
my $t0 = time;
is($node->safe_psql('app', $local . 'SELECT hopper.reaper_stop()'), 't', 'reaper_stop() stops the reaper');
cmp_ok(time - $t0, '<', 5, 'without waiting out its timeout');

$listener->{run}->kill_kill;
$waits->{run}->kill_kill;
$node->stop('immediate');
done_testing();
