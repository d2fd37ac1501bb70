# Pulls waiting on a queue all get the jobs of a packed batch pushed while they wait, within
# milliseconds of its commit, as they get a batch stored a row per job. The push wakes one pull
# per job, and they all go for the same packed row: one locks it, the others pass it over and
# claim nothing. Before, nothing woke those again when the first one's claim committed and left
# the row's other jobs waiting: each found a job only at its once-a-second recheck, the last ones
# 2 or 3 s after the push. Checked for queue_pull, queue_pull with a kinds filter (the packed
# claim statement) and queue_take.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $waiters = 20;
my $node = PostgreSQL::Test::Cluster->new('packed_wake');
$node->init;
$node->append_conf('postgresql.conf', "max_connections = 60\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hopper');

my $pusher = start_session($node, 'postgres');
session_query($pusher, 'SET hopper.pack_batches = on');
my @sessions = map { start_session($node, 'postgres') } 1 .. $waiters;

for my $case (
	[ 'queue_pull', 'pw', "hopper.queue_pull('pw', 1, wait => '8 s')" ],
	[ 'queue_pull with kinds', 'pk', "hopper.queue_pull('pk', 1, kinds => ARRAY['k'], wait => '8 s')" ],
	[ 'queue_take', 'pt', "hopper.queue_take('pt', 1, wait => '8 s')" ])
{
	my ($what, $queue, $call) = @$case;
	$node->safe_psql('postgres', "SELECT hopper.queue_create('$queue')");
	session_send($_, "SELECT extract(epoch FROM pg_catalog.clock_timestamp()), count(*) FROM $call")
	  for @sessions;
	ok( defined wait_until(
			$node, 'postgres',
			"SELECT count(*) = $waiters FROM pg_stat_activity WHERE wait_event_type = 'Extension' "
			  . "AND query LIKE '%(''$queue''%' AND backend_type = 'client backend'"),
		"$what: $waiters pulls wait");
	# One packed row, as the push's own transaction sees it; the time is taken once the commit
	# has returned (a slow flush on a busy machine is not the wake-up's delay), so a pull woken
	# by the commit may even come out a little before it.
	my ($jobs, $rows, $pushed_at) = split /\n/, session_query($pusher,
		"BEGIN; SELECT count(*) FROM hopper.queue_push_batch('$queue', "
		  . "array_fill('{}'::jsonb, ARRAY[$waiters]), kind => 'k'); "
		  . "SELECT count(*) FROM hopper.job_batches WHERE queue = '$queue'; COMMIT; "
		  . "SELECT extract(epoch FROM pg_catalog.clock_timestamp())");
	is("$jobs|$rows", "$waiters|1", "$what: the batch is pushed as one packed row");
	my (@after, $got);
	for my $s (@sessions)
	{
		my ($returned_at, $count) = split /\|/, session_result($s);
		$got += $count;
		push @after, $returned_at - $pushed_at;
	}
	@after = sort { $a <=> $b } @after;
	note sprintf('%s: pulls returned %s s after the push', $what,
		join(', ', map { sprintf '%.3f', $_ } @after));
	is($got, $waiters, "$what: every waiting pull got a job");
	# Woken: within milliseconds of the commit; not woken, at a recheck a second or more later.
	cmp_ok($after[-1], '<', 0.5, "$what: every pull returned within 0.5 s of the push");
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM hopper.job_batches WHERE queue = '$queue'"),
		'0', "$what: the packed row was taken whole");
}

$_->{in} .= "\\q\n" for ($pusher, @sessions);
$_->{run}->finish for ($pusher, @sessions);
$node->stop;
done_testing();
