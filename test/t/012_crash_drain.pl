# A drain through a crash. Three workers complete and pull concurrently, the server is killed in
# the middle, and the rest is drained after recovery. Claim-only transactions commit without
# waiting for their WAL flush (hopper.async_claims) and the WAL writer here is lazy, so the crash
# loses such claims; completions must not be lost with them. Every completion a worker saw commit
# must be in history after recovery, and every job must finish exactly once: none lost, none twice.
# Once with a job per row, once with the jobs pushed packed (hopper.pack_batches), whose claims
# also write the packed rows.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $jobs = 1000;
my $node = PostgreSQL::Test::Cluster->new('crash_drain');
$node->init;
# An asynchronous commit's WAL stays in memory until the crash, which then loses it.
$node->append_conf('postgresql.conf',
	"synchronous_commit = on\nwal_writer_delay = 10s\nwal_writer_flush_after = 0\n");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION hopper');
$node->safe_psql('app', 'CREATE TABLE pushed (queue text, id bigint)');

# Each worker holds one job at a time and finishes it in its next transaction, which also claims
# the next job: queue_complete_pull; queue_complete and queue_pull in one transaction (the
# completion's result is seen); a completion on its own, then a claim-only pull.
my @kinds = ('complete_pull', 'complete_and_pull', 'apart');
my %acknowledged;    # id => the worker that saw its completion commit

sub statement
{
	my ($w) = @_;
	my $q = $w->{queue};
	my $pull = "SELECT id || ' ' || lease_token FROM hopper.queue_pull('$q', 1, lease => '1 hour')";
	if ($w->{kind} eq 'complete_pull')
	{
		my ($id, $tok) = $w->{id} ? ($w->{id}, $w->{tok}) : ('NULL', 'NULL');
		return "SELECT id || ' ' || lease_token "
		  . "FROM hopper.queue_complete_pull($id, $tok, NULL, '$q', 1, lease => '1 hour')";
	}
	if ($w->{kind} eq 'complete_and_pull')
	{
		return $pull unless $w->{id};
		return "BEGIN; SELECT 'done ' || hopper.queue_complete($w->{id}, $w->{tok}); $pull; COMMIT";
	}
	# apart: a completion in one transaction, the next claim in another.
	return $pull unless $w->{id};
	return "SELECT 'done ' || hopper.queue_complete($w->{id}, $w->{tok})";
}

sub record
{
	my ($w, $out) = @_;
	my $held = $w->{id};
	$w->{id} = 0;
	for my $line (split /\n/, $out)
	{
		if ($line eq 'done true')
		{
			$acknowledged{$held} = $w->{kind};
		}
		elsif ($line =~ /^(\d+) (\d+)$/)
		{
			($w->{id}, $w->{tok}) = ($1, $2);
		}
	}
	# queue_complete_pull reports no outcome: its completion counts as seen once the call returns,
	# since the job was held under an hour's lease that nobody else could take.
	$acknowledged{$held} = $w->{kind} if $held && $w->{kind} eq 'complete_pull';
}

# Pushes $jobs jobs into $queue (packed or a row each), drains them with the three workers, kills
# the server in the middle, and checks the outcome after recovery.
sub drain_through_crash
{
	my ($queue, $packed) = @_;
	%acknowledged = ();
	$node->safe_psql('app',
		"SET hopper.pack_batches = $packed;\n"
		  . "INSERT INTO pushed SELECT '$queue', hopper.queue_push_batch('$queue', "
		  . "array_fill('{}'::jsonb, ARRAY[$jobs]))");
	is( $node->safe_psql('app', "SELECT count(*) FROM hopper.job_batches WHERE queue = '$queue'")
		  > 0 ? 'packed' : 'rows',
		$packed eq 'on' ? 'packed' : 'rows',
		"$queue: $jobs jobs pushed " . ($packed eq 'on' ? 'packed' : 'a row each'));
	$node->safe_psql('app', 'CHECKPOINT');
	my @workers =
	  map { { kind => $_, queue => $queue, s => start_session($node, 'app'), id => 0, tok => 0 } } @kinds;

	# Rounds in which all three send their statement, then all three collect it.
	# An odd number: the last round's pull of the worker that completes apart is a claim on its own.
	for my $round (1 .. 121)
	{
		session_send($_->{s}, statement($_)) for @workers;
		record($_, session_result($_->{s})) for @workers;
	}
	my @holding = grep { $_->{id} } @workers;
	my $running = $node->safe_psql('app',
		"SELECT count(*) FROM hopper.jobs WHERE queue = '$queue' AND state = 'running'");
	my $seen = scalar(keys %acknowledged);
	cmp_ok($seen, '>=', 250, "$queue: $seen completions seen before the crash");
	is($running, scalar(@holding), "$queue: " . scalar(@holding) . ' jobs held when the server is killed');

	$node->stop('immediate');
	$node->start;
	$_->{s}->{run}->kill_kill for @workers;

	my $seen_ids = join(',', sort { $a <=> $b } keys %acknowledged);
	my $lost = $node->safe_psql('app',
		"SELECT count(*) || ' ' || coalesce(string_agg(id::text, ',' ORDER BY id), '') "
		  . "FROM unnest('{$seen_ids}'::bigint[]) id WHERE NOT EXISTS "
		  . "(SELECT 1 FROM hopper.job_history h WHERE h.id = id.id AND h.state = 'completed')");
	is((split / /, $lost)[0], '0', "$queue: every completion seen before the crash survived it")
	  or diag("lost: $lost");
	for my $kind (@kinds)
	{
		my $n = grep { $acknowledged{$_} eq $kind } keys %acknowledged;
		cmp_ok($n, '>', 0, "$queue: $kind completed $n jobs before the crash");
	}

	# The rest, drained two hours ahead (`at`) so that the hour's leases held at the crash have
	# expired: a pull short of its n rescues them.
	drain_ahead($node, 'app', $queue, 500, 6, '2 hours');
	is( $node->safe_psql('app',
			"SELECT (SELECT count(*) FROM hopper.jobs WHERE queue = '$queue') + (SELECT "
			  . "coalesce(sum(cardinality(ids) - taken), 0) FROM hopper.job_batches WHERE queue = '$queue')"),
		'0', "$queue: no job left after recovery")
	  or diag($node->safe_psql('app', "SELECT state, count(*) FROM hopper.jobs GROUP BY state"));
	is( $node->safe_psql('app',
			"SELECT count(*) || ' ' || count(DISTINCT id) FROM hopper.job_history "
			  . "WHERE queue = '$queue' AND state = 'completed'"),
		"$jobs $jobs",
		"$queue: every one of the $jobs jobs completed exactly once");
	is( $node->safe_psql('app',
			"SELECT count(*) FROM hopper.job_history h WHERE queue = '$queue' AND NOT EXISTS "
			  . "(SELECT 1 FROM pushed p WHERE p.id = h.id)"),
		'0',
		"$queue: and only the jobs pushed");
}

drain_through_crash('crash', 'off');
drain_through_crash('crashp', 'on');

$node->stop;
done_testing();
