# A rescue storm: 100,000 running jobs whose leases expired together are rescued by the reaper in
# bounded transactions while pushes, pulls and completions carry on; then 20,000 session-bound jobs
# whose backend exited. Reports how long each took.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $jobs = 100_000;
my $node = PostgreSQL::Test::Cluster->new('storm');
$node->init;
$node->append_conf('postgresql.conf', "shared_buffers = 128MB\nsynchronous_commit = off\n");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION hopper');
# Held back while the storm is prepared, so that the rescue is measured from a standing start.
$node->safe_psql('app', 'SELECT hopper.reaper_stop()');

my $t0 = time;
$node->safe_psql('app',
	join '', map { "SELECT count(*) FROM hopper.queue_push_batch('storm', array_fill('{}'::jsonb, ARRAY[1000]));\n" }
	  1 .. $jobs / 1000);
my $t_push = time - $t0;
$t0 = time;
# All on one clock (`at`), by which no lease has ended yet: with no reaper running, a pull takes
# over the expired leases of its queue before it claims, and the first 1-second leases would end
# before the last pull.
my $clock = $node->safe_psql('app', 'SELECT pg_catalog.clock_timestamp()');
$node->safe_psql('app',
	join '', map { "SELECT count(*) FROM hopper.queue_pull('storm', 1000, lease => '1 second', worker => 'doomed', at => '$clock');\n" }
	  1 .. $jobs / 1000);
my $t_pull = time - $t0;
note sprintf('storm set-up: %d jobs pushed in %.1f s, pulled in %.1f s', $jobs, $t_push, $t_pull);
is( $node->safe_psql('app',
		"SELECT count(*) FROM hopper.jobs WHERE queue = 'storm' AND state = 'running' AND lease_until < now() + interval '1 second'"),
	$jobs, "$jobs running jobs on 1-second leases");
sleep 1.2;    # every lease has ended now

my $client = start_session($node, 'app');
session_query($client, 'SET hopper.notify = off');
is($node->safe_psql('app', 'SELECT hopper.reaper_start()'), 't', 'reaper started');

$t0 = time;
# Until the client's pulls see a reaper running they take over expired leases themselves: the
# reaper is to rescue them all here.
ok(defined wait_until($node, 'app',
		"SELECT count(*) = 1 FROM hopper.reaper_status() WHERE database = 'app'"),
	'the reaper runs');
my ($ops, $max_op, $done_at) = (0, 0, undef);
my (%seen_running, $max_xact);
$max_xact = 0;
while (time - $t0 < 180)
{
	# Regular traffic on another queue and on the storm's queue itself, timed per call.
	for my $sql (
		"SELECT hopper.queue_push('live', '{\"n\": 1}')",
		"SELECT count(*) FROM hopper.queue_pull('live', 1) j WHERE hopper.queue_complete(j.id, j.lease_token)",
		"SELECT hopper.queue_push('storm', '{\"late\": true}', kind => 'late')",
		# Only the late kind, so the rescued jobs stay put for the count at the end.
		"SELECT count(*) FROM hopper.queue_pull('storm', 1, kinds => ARRAY['late']) j "
		  . "WHERE hopper.queue_complete(j.id, j.lease_token)")
	{
		my $s = time;
		session_query($client, $sql);
		my $d = time - $s;
		$max_op = $d if $d > $max_op;
		$ops++;
	}
	my ($running, $xact) = split /\|/, $node->safe_psql('app',
		"SELECT (SELECT count(*) FROM hopper.jobs WHERE queue = 'storm' AND state = 'running'), "
		  . "COALESCE((SELECT max(extract(epoch FROM clock_timestamp() - xact_start)) FROM pg_stat_activity "
		  . "WHERE backend_type = 'hopper reaper'), 0)");
	$seen_running{$running} = 1;
	$max_xact = $xact if $xact > $max_xact;
	if ($running == 0) { $done_at = time - $t0; last; }
}
ok(defined $done_at, "all $jobs expired leases rescued");
note sprintf('rescue storm: %d expired leases rescued in %.1f s (%.0f jobs/s), naptime 1 s, batch 1000',
	$jobs, $done_at // -1, $done_at ? $jobs / $done_at : 0);
note sprintf('meanwhile %d pushes/pulls/completions, slowest %.3f s; longest reaper transaction seen %.3f s',
	$ops, $max_op, $max_xact);
my @partial = grep { $_ > 0 && $_ < $jobs } keys %seen_running;
ok(@partial >= 2, 'the rescue went in steps (committed batches were visible on the way)');
ok($max_xact < 5, 'no reaper transaction ran long');
ok($max_op < 5, 'pushes, pulls and completions kept working throughout');
is( $node->safe_psql('app',
		"SELECT count(*) FROM hopper.jobs WHERE queue = 'storm' AND attempt = 1 "
		  . "AND last_error = 'lease expired (worker doomed)' AND lease_token IS NULL"),
	$jobs, 'every rescued job has its attempt counted, its error logged and its token cleared');
ok($node->safe_psql('app',
		"SELECT jobs_rescued >= $jobs FROM hopper.reaper_status() WHERE database = 'app'") eq 't',
	'reaper_status counts them');

# The same for session-bound jobs whose backend exited: no lease to wait for.
my $orphans = 20_000;
$node->safe_psql('app', 'SELECT hopper.reaper_stop()');
$node->safe_psql('app',
	join '', map { "SELECT count(*) FROM hopper.queue_push_batch('orphans', array_fill('{}'::jsonb, ARRAY[1000]));\n" }
	  1 .. $orphans / 1000);
$node->safe_psql('app',
	join '', map { "SELECT count(*) FROM hopper.queue_pull('orphans', 1000, lease => '1 hour', session_bound => true);\n" }
	  1 .. $orphans / 1000);    # safe_psql's session ends here: the claimer is gone
is($node->safe_psql('app', 'SELECT hopper.reaper_start()'), 't', 'reaper started again');
$t0 = time;
my $took = wait_until($node, 'app',
	"SELECT count(*) = 0 FROM hopper.jobs WHERE queue = 'orphans' AND state = 'running'", 120);
ok(defined $took, "all $orphans session-bound jobs of the exited backend rescued");
note sprintf('orphan storm: %d session-bound jobs rescued in %.1f s after the reaper started',
	$orphans, $took // -1);
is( $node->safe_psql('app',
		"SELECT count(*) FROM hopper.jobs WHERE queue = 'orphans' AND state = 'available' "
		  . "AND attempt = 1 AND last_error LIKE 'worker backend gone (pid %)'"),
	$orphans, 'each one available again with its attempt counted');

session_query($client, 'SELECT 1');
$client->{in} .= "\\q\n";
$client->{run}->finish;
$node->stop;
done_testing();
