# The reaper must not get in the way of the database's users: DROP EXTENSION queued behind a
# transaction that holds a lock on hopper's tables must go through once that transaction ends
# (the reaper's pass locked the tables in another order, and the DROP died with 40P01), and a
# producer that makes many queues must not slow the rescue of stuck jobs (every pass did work,
# and committed, for every queue).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('gives_way');
$node->init;
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'hopper'\nhopper.reaper_naptime = 200ms\n");
$node->start;

# 1. DROP EXTENSION waiting for a worker's transaction, while the reaper runs its passes.
$node->safe_psql('postgres', 'CREATE DATABASE dropping');
for my $holding ("SELECT id FROM hopper.queue_take('w', 1)", 'SELECT count(*) FROM hopper.jobs')
{
	$node->safe_psql('dropping', "CREATE EXTENSION hopper; SELECT hopper.queue_push('w', '{}')");
	ok(defined reaper_runs($node, 'dropping'), 'the reaper runs');
	my $holder = start_session($node, 'dropping');
	session_query($holder, "BEGIN; $holding");
	my $dropper = start_session($node, 'dropping');
	my $pid = session_backend_pid($dropper);
	session_send($dropper, 'DROP EXTENSION hopper');
	ok(defined wait_until($node, 'postgres',
			"SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $pid"),
		'DROP EXTENSION waits for the open transaction');
	# Long enough for several passes to start while the DROP waits (naptime 200 ms), and more
	# than deadlock_timeout (1 s).
	sleep 3;
	session_query($holder, 'COMMIT');
	my $dropped = eval { session_result($dropper); 1 };
	ok($dropped, "DROP EXTENSION goes through once the transaction ends ($holding)")
	  or diag $@;
	ok(defined wait_until($node, 'postgres',
			"SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'hopper reaper' "
			  . "AND datname = 'dropping'"),
		'and the reaper exits');
	$_->{run}->finish for $holder, $dropper;
	$node->safe_psql('dropping', 'DROP EXTENSION IF EXISTS hopper');
}

done_testing();
