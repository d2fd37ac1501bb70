# When reapers are started, and when not: never from a hot standby (a worker registered there
# keeps its slot until promotion), never in a template database, once (not once per backend)
# when many pushing backends find the reaper gone, again after DROP and at once CREATE
# EXTENSION, and by the launcher in every database with the extension even when worker slots
# are short.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

# Every hopper reaper process of database $db, started or not yet holding its lock.
sub reaper_processes
{
	my ($node, $db) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'hopper reaper' AND datname = '$db'");
}

# Whether a parallel query on database $db gets its worker.
sub parallel_worker_launched
{
	my ($node, $db) = @_;
	my $plan = $node->safe_psql($db,
		"SET force_parallel_mode = on; SET max_parallel_workers_per_gather = 1;\n"
		  . "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT count(*) FROM pg_class");
	return $plan =~ /Workers Launched: 1/ ? 1 : 0;
}

# --- A hot standby: pushes, pulls and takes sent there fail and register no worker. -----------
my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
# Few slots, as on a small server: the standby gets the same.
$primary->append_conf('postgresql.conf', "max_worker_processes = 8\nmax_connections = 40\nhopper.reaper_naptime = '2s'\n");
$primary->start;
$primary->safe_psql('postgres', 'CREATE DATABASE app');
$primary->safe_psql('app', "CREATE EXTENSION hopper; SELECT hopper.queue_push('q', '{}')");
$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

my $refused = 0;
for my $i (1 .. 4)
{
	# Each in a backend of its own: a backend checks for its reaper once in 5 s.
	for my $sql ("SELECT hopper.queue_pull('q', 1)", "SELECT hopper.queue_push('q', '{}')",
		"BEGIN; SELECT hopper.queue_take('q', 1); COMMIT")
	{
		my ($rc, $out, $err) = $standby->psql('app', $sql);
		$refused++ if $rc != 0 && $err =~ /read-only transaction/;
	}
}
is($refused, 12, 'the standby refuses pushes, pulls and takes');
ok(parallel_worker_launched($standby, 'app'), 'and a parallel query there still gets its worker');

$standby->promote;
sleep 2;
is(reaper_processes($standby, 'app'), '0', 'promotion starts no reaper left behind by those calls');
$standby->safe_psql('app', "SELECT hopper.queue_push('q', '{}')");
ok(defined reaper_runs($standby, 'app'), 'the first push after promotion starts one');
is(reaper_processes($standby, 'app'), '1', 'one reaper');
$primary->stop;
my $node = $standby;

# --- A template database gets no reaper. -------------------------------------------------------
$node->safe_psql('template1', 'CREATE EXTENSION hopper');
$node->safe_psql('template1', "SELECT hopper.queue_push('t', '{}')");
is($node->safe_psql('template1', 'SELECT hopper.reaper_start()'), 'f',
	'reaper_start() in a template starts nothing');
sleep 2;
is(reaper_processes($node, 'template1'), '0',
	'CREATE EXTENSION, a push or reaper_start() in template1 leaves no reaper connected to it');
$node->safe_psql('postgres', 'CREATE DATABASE from_template');
$node->safe_psql('from_template', "SELECT hopper.queue_push('t', '{}')");
ok(defined reaper_runs($node, 'from_template'), 'a database made from it gets its reaper');
$node->safe_psql('postgres', 'DROP DATABASE from_template');
$node->safe_psql('template1', 'DROP EXTENSION hopper');

# --- Many backends find the reaper gone at once: one reaper starts. --------------------------
{
	my @sessions = map { start_session($node, 'app') } 1 .. 15;
	session_query($_, 'SELECT 1') for @sessions;
	my ($old) = split /\|/, reaper_of($node, 'app');
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
	ok(defined wait_until($node, 'postgres',
			"SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'hopper reaper'", 10),
		'the reaper is gone');
	# None of these backends has looked for the reaper yet: each looks at its first push.
	session_send($_, "SELECT hopper.queue_push('q', '{}')") for @sessions;
	session_result($_) for @sessions;
	# Once one holds the lock (and names itself), a start that lost the race leaves at once: the
	# losers kept trying for 3 s, each in a worker slot of its own.
	ok(defined wait_until($node, 'postgres',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'hopper reaper' "
			  . "AND application_name LIKE 'hopper reaper: %'", 10),
		'a reaper runs again');
	ok(defined wait_until($node, 'postgres',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'hopper reaper'", 2),
		'the pushing backends leave one reaper process, within 2 s of its start');
	note 'reaper processes now: ' . reaper_processes($node, 'app');
	for my $s (@sessions)
	{
		$s->{in} .= "\\q\n";
		$s->{run}->finish;
	}
}

# --- DROP EXTENSION and at once CREATE EXTENSION in a long transaction: the old reaper's pass
# finds no extension and leaves meanwhile; a reaper serves the new one. -----------------------
{
	ok(defined reaper_runs($node, 'app'), 'the reaper runs before the drop');
	my $s = start_session($node, 'app');
	# Longer than a naptime (2 s): the old reaper makes a pass while CREATE EXTENSION is open.
	session_query($s,
		"DROP EXTENSION hopper; BEGIN; CREATE EXTENSION hopper; SELECT pg_sleep(3.5); COMMIT");
	ok(defined wait_until($node, 'app',
			"SELECT count(*) = 1 FROM hopper.reaper_status() WHERE database = 'app' AND last_run IS NOT NULL", 10),
		'after DROP and CREATE EXTENSION a reaper serves the database');
	$s->{in} .= "\\q\n";
	$s->{run}->finish;
}

unlike(slurp_file($node->logfile), qr/server process .* was terminated by signal|TRAP:/,
	'no server crash');
$node->stop;

# --- Preloaded, few slots, many databases without the extension: the launcher still reaches the
# one with it, late in pg_database, and warns of none of the others. --------------------------
{
	my $pre = PostgreSQL::Test::Cluster->new('preload');
	$pre->init;
	# The launcher and the logical replication launcher take 2 of the 8: 6 left for the checks.
	$pre->append_conf('postgresql.conf',
		"shared_preload_libraries = 'hopper'\nmax_worker_processes = 8\n");
	$pre->start;
	$pre->safe_psql('postgres', join('', map { "CREATE DATABASE n$_ TEMPLATE template0;\n" } 1 .. 18));
	$pre->safe_psql('postgres', 'CREATE DATABASE zz');
	$pre->safe_psql('zz', 'CREATE EXTENSION hopper');
	my $id = $pre->safe_psql('zz', "SELECT hopper.queue_push('late', '{}')");
	$pre->safe_psql('zz', "SELECT id FROM hopper.queue_pull('late', 1, lease => '1 second')");
	my $offset = -s $pre->logfile;
	$pre->restart;
	my $took = wait_until($pre, 'zz',
		"SELECT count(*) = 1 FROM hopper.reaper_status() WHERE database = 'zz' AND last_run IS NOT NULL", 100);
	ok(defined $took, 'the launcher starts the reaper of the database last in pg_database');
	note sprintf('its reaper ran %.1f s after the restart', $took // -1);
	ok(defined wait_until($pre, 'zz', "SELECT state <> 'running' FROM hopper.job_status($id)", 10),
		'and it rescues the expired lease');
	my $log = substr(slurp_file($pre->logfile), $offset);
	unlike($log, qr/could not start the hopper reaper/,
		'no warning for the databases without the extension');
	$pre->stop;
}

done_testing();
