# Calls cancelled and sessions killed in the middle of their work. Six clients push (single,
# batched, packed), pull, take, complete, fail, release, cancel and retry on a plain queue, a queue
# with concurrency and per-key limits, a rate-limited one and one whose pulls wait in the server
# for jobs, while another session cancels a random one of their statements every few milliseconds
# and terminates a random session now and then. What a cancelled call did must be undone whole:
# afterwards no server process has crashed, no error but the expected ones was raised (a cancel
# must come out as a cancel), the limited queue still hands out as many jobs as its limit allows,
# every job pushed (recorded in the pushing statement itself) finishes exactly once, and
# pg_amcheck finds the tables and indexes sound.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $seconds = 20;
my $node = PostgreSQL::Test::Cluster->new('cancel_storm');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION hopper; CREATE EXTENSION amcheck');
$node->safe_psql('app',
	"CREATE TABLE pushed (queue text, id bigint);\n"
	  . "SELECT hopper.queue_create('cs', max_attempts => 1000);\n"
	  . "SELECT hopper.queue_create('csl', max_attempts => 1000);\n"
	  . "SELECT hopper.queue_set_concurrency('csl', 3, NULL);\n"
	  . "SELECT hopper.queue_set_key_limit('csl', 'k1', 1);\n"
	  . "SELECT hopper.queue_create('csr', max_attempts => 1000);\n"
	  . "SELECT hopper.queue_create('csw', max_attempts => 1000);\n"
	  . "SELECT hopper.queue_set_rate_limit('csr', 5000, '1 second');");

# Weighted statements; a push records its ids in the same statement, so a cancelled push leaves
# neither job nor record. Leases of a second are left to expire now and then.
my @mix = (
	[ 3, "INSERT INTO pushed SELECT 'cs', hopper.queue_push('cs', '{}')" ],
	[ 2, "INSERT INTO pushed SELECT 'csl', hopper.queue_push('csl', '{}', concurrency_key => 'k' || (random() * 4)::int)" ],
	[ 1, "BEGIN; SET LOCAL hopper.pack_batches = on; INSERT INTO pushed SELECT 'cs', id FROM hopper.queue_push_batch('cs', array_fill('{}'::jsonb, ARRAY[10])) id; COMMIT" ],
	[ 1, "INSERT INTO pushed SELECT 'cs', id FROM hopper.queue_push_batch('cs', array_fill('{}'::jsonb, ARRAY[5])) id" ],
	[ 3, "SELECT count(*) FROM hopper.queue_pull('cs', 3) j WHERE hopper.queue_complete(j.id, j.lease_token)" ],
	[ 2, "SELECT count(*) FROM hopper.queue_pull('csl', 2) j WHERE hopper.queue_complete(j.id, j.lease_token)" ],
	[ 1, "INSERT INTO pushed SELECT 'csr', hopper.queue_push('csr', '{}')" ],
	[ 1, "INSERT INTO pushed SELECT 'csw', hopper.queue_push('csw', '{}')" ],
	[ 2, "SELECT count(*) FROM hopper.queue_pull('csw', 1, wait => '200 ms') j WHERE hopper.queue_complete(j.id, j.lease_token)" ],
	[ 1, "SELECT count(*) FROM hopper.queue_take('csw', 1, wait => '200 ms')" ],
	[ 1, "SELECT count(*) FROM hopper.queue_pull('csr', 2) j WHERE hopper.queue_complete(j.id, j.lease_token)" ],
	[ 2, "SELECT count(*) FROM hopper.queue_take('cs', 2)" ],
	[ 1, "BEGIN; SELECT count(*) FROM hopper.queue_take('cs', 1); SAVEPOINT w; ROLLBACK TO w; COMMIT" ],
	[ 1, "SELECT count(*) FROM hopper.queue_pull('cs', 1, lease => '1 second')" ],
	[ 1, "SELECT count(*) FROM hopper.queue_pull('csl', 1, lease => '1 second')" ],
	[ 1, "SELECT count(*) FROM hopper.queue_complete_pull(NULL, NULL, NULL, 'csl', 1, lease => '1 second')" ],
	[ 1, "SELECT hopper.queue_fail(j.id, j.lease_token, 'boom', retry_in => '0') FROM hopper.queue_pull('cs', 1) j" ],
	[ 1, "SELECT hopper.queue_fail(j.id, j.lease_token, 'boom', retry_in => '0') FROM hopper.queue_pull('csl', 1) j" ],
	[ 1, "SELECT hopper.queue_release(j.id, j.lease_token) FROM hopper.queue_pull('csl', 1) j" ],
	[ 1, "SELECT hopper.queue_complete_many(array_agg(id), array_agg(lease_token)) FROM hopper.queue_pull('cs', 4) HAVING count(*) > 0" ],
	[ 1, "SELECT hopper.queue_heartbeat(j.id, j.lease_token) AND hopper.queue_complete(j.id, j.lease_token) FROM hopper.queue_pull('cs', 1) j" ],
	[ 1, "SELECT hopper.queue_cancel(id) FROM hopper.jobs WHERE queue = 'cs' AND state = 'available' ORDER BY random() LIMIT 1" ],
	[ 1, "SELECT hopper.queue_retry(id) FROM hopper.job_history WHERE queue = 'cs' AND state = 'cancelled' ORDER BY random() LIMIT 1" ]);
my @pool = map { ($_->[1]) x $_->[0] } @mix;
srand(16);

my $dir = PostgreSQL::Test::Utils::tempdir;
my $connstr = $node->connstr('app') . ' application_name=storm';

# A client: psql running 300 statements of the mix, errors reported by SQLSTATE and not stopping
# it. Started again whenever it ends (its statements done, or its session terminated).
sub start_client
{
	my ($c) = @_;
	my $file = "$dir/client$c.sql";
	open(my $fh, '>', $file) or die "$file: $!";
	print $fh "\\set VERBOSITY verbose\n";
	print $fh $pool[ int(rand(@pool)) ], ";\n" for 1 .. 300;
	close $fh;
	my %cl = (err => "$file.err");
	$cl{run} = IPC::Run::start([ 'psql', '-X', '-q', '-d', $connstr, '-f', $file ],
		'>', '/dev/null', '2>', $cl{err});
	return \%cl;
}

my $killer_sql = '';
for my $i (1 .. 100_000)
{
	$killer_sql .= "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'storm' "
	  . "AND state = 'active' ORDER BY random() LIMIT 1;\nSELECT pg_sleep(0.003);\n";
	$killer_sql .= "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'storm' "
	  . "AND state = 'active' ORDER BY random() LIMIT 1;\n"
	  if $i % 40 == 0;
}
append_to_file("$dir/killer.sql", $killer_sql);
my $killer = IPC::Run::start([ 'psql', '-X', '-q', '-d', $node->connstr('app'), '-f', "$dir/killer.sql" ],
	'>', '/dev/null', '2>', '/dev/null');

my @clients = map { start_client($_) } 1 .. 6;
my ($errors, $runs) = ('', 6);
my $end = time + $seconds;
while (time < $end)
{
	for my $c (0 .. $#clients)
	{
		next if $clients[$c]->{run}->pumpable;
		$clients[$c]->{run}->finish;
		$errors .= slurp_file($clients[$c]->{err});
		$clients[$c] = start_client($c + 1);
		$runs++;
	}
	usleep(20_000);
}
$killer->kill_kill;
for my $cl (@clients)
{
	$cl->{run}->kill_kill;
	$errors .= slurp_file($cl->{err});
}

# Errors a cancelled or killed call may raise, and those of the mix's own races: a retry of a job
# someone retried first (55000), a savepoint or transaction that a cancel took away (25P01,
# 25P02, 3B001).
my %expected = map { $_ => 1 } qw(57014 57P01 25P01 25P02 3B001 55000);
my %seen;
$seen{$1}++ while $errors =~ /(?:ERROR|FATAL):  ([0-9A-Z]{5}):/g;
note('errors by SQLSTATE over ' . $runs . ' client runs: '
	  . join(' ', map { "$_=$seen{$_}" } sort keys %seen));
ok(($seen{'57014'} // 0) > 20, 'the storm cancelled statements');
is(join(' ', grep { !$expected{$_} } sort keys %seen), '', 'no error but a cancel, a kill and the races of the mix');
ok(slurp_file($node->logfile) !~ /terminated by signal|was terminated/, 'no server process crashed');

# The limited queue is not held up by claims that a cancel or kill rolled back.
$node->safe_psql('app',
	"INSERT INTO pushed SELECT 'csl', hopper.queue_push('csl', '{}') FROM generate_series(1, 3)");
is( $node->safe_psql('app',
		"SELECT count(*) FROM hopper.queue_pull('csl', 3, at => now() + interval '2 hours') j "
		  . "WHERE hopper.queue_complete(j.id, j.lease_token)"),
	'3', 'the limited queue still hands out three jobs at a time');

$node->safe_psql('app',
	"SELECT hopper.queue_set_concurrency('csl', NULL, NULL);\n"
	  . "SELECT hopper.queue_set_key_limit('csl', 'k1', NULL);\n"
	  . "SELECT hopper.queue_set_rate_limit('csr', NULL, NULL);");
is(drain_queues($node, 'app', 'cs', 'csl', 'csr', 'csw'), '0', 'the queues drained');
note('pushed, finished: '
	  . $node->safe_psql('app', "SELECT (SELECT count(*) FROM pushed) || ' ' || (SELECT count(*) FROM hopper.job_history)"));
finished_once($node, 'app', 'storm', 'cs', 'csl', 'csr', 'csw');
amcheck_ok($node, 'after the storm', 1);

$node->stop;
done_testing();
