# On a queue without limits, a claim that is rolled back (its transaction, or a savepoint) wakes
# the pulls waiting on the queue at once: the job it held is available again. (Before, only a
# limited queue's did; on others the waiting pull found the job at its once-a-second recheck.)
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('rollback_wakes');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hopper');
$node->safe_psql('postgres', "SELECT hopper.queue_create('rw')");

# Until a pull of queue rw is asleep in its wait.
sub asleep
{
	return wait_until($node, 'postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event_type = 'Extension' "
		  . "AND query LIKE '%queue_pull(''rw''%' AND backend_type = 'client backend'");
}

my $now = "SELECT extract(epoch FROM pg_catalog.clock_timestamp())";
my $claimer = start_session($node, 'postgres');
my $waiter = start_session($node, 'postgres');

my @cases = (
	[ 'a pull rolled back', 'BEGIN', "SELECT count(*) FROM hopper.queue_pull('rw', 1)", 'ROLLBACK' ],
	[ 'a take rolled back', 'BEGIN', "SELECT count(*) FROM hopper.queue_take('rw', 1)", 'ROLLBACK' ],
	[ 'a take rolled back to a savepoint', 'BEGIN; SAVEPOINT s',
		"SELECT count(*) FROM hopper.queue_take('rw', 1)", 'ROLLBACK TO s; COMMIT' ]);
for my $case (@cases)
{
	my ($name, $begin, $claim, $undo) = @$case;
	my @took;
	for my $i (1 .. 3)
	{
		my $id = $node->safe_psql('postgres', "SELECT hopper.queue_push('rw', '{}')");
		session_query($claimer, $begin);
		is(session_query($claimer, $claim), '1', "$name, round $i: the claim holds the job");
		session_send($waiter,
			"SELECT id, extract(epoch FROM pg_catalog.clock_timestamp()) "
			  . "FROM hopper.queue_pull('rw', 1, wait => '10 s')");
		ok(defined asleep(), "$name, round $i: a pull waits");
		my $undone_at = session_query($claimer, "$undo; $now");
		my ($got, $returned_at) = split /\|/, session_result($waiter);
		is($got, $id, "$name, round $i: the waiting pull gets the job");
		push @took, ($returned_at // 99) - $undone_at;
	}
	note sprintf('%s: the waiting pull returned %s s after it', $name,
		join(', ', map { sprintf '%.3f', $_ } @took));
	# Woken: within 0.5 s (typically milliseconds); not woken, it returns at its recheck, about
	# a second after it began to sleep.
	ok((grep { $_ < 0.5 } @took) == 3, "$name: the waiting pull returned within 0.5 s each time");
}

$_->{in} .= "\\q\n" for ($claimer, $waiter);
$_->{run}->finish for ($claimer, $waiter);
$node->stop;
done_testing();
