# The reaper with shared_preload_libraries = 'hopper': a launcher starts one reaper per database
# that has the extension, at server start and whenever one goes missing, never one where the
# extension is absent; crash recovery works the same.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('preload');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hopper'\n");
$node->start;

ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'hopper reaper launcher'", 10),
	'the launcher runs');

$node->safe_psql('postgres', 'CREATE DATABASE with_ext');
$node->safe_psql('postgres', 'CREATE DATABASE without_ext');
$node->safe_psql('with_ext', 'CREATE EXTENSION hopper');
ok(defined wait_until($node, 'with_ext',
		"SELECT count(*) = 1 FROM hopper.reaper_status() WHERE database = 'with_ext' AND mode = 'preload'", 10),
	'CREATE EXTENSION in a preloaded server: a reaper in preload mode at once');

# After a restart the launcher alone brings the reaper back: no client touches the database.
$node->restart;
my $took = wait_until($node, 'postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE datname = 'with_ext' "
	  . "AND application_name = 'hopper reaper: preload'", 20);
ok(defined $took, 'after a restart the launcher starts the reaper by itself');
note sprintf('reaper running %.3f s after the restart', $took // -1);
is( $node->safe_psql('with_ext', 'SELECT hopper.reaper_start()'),
	'f', 'a second reaper is refused (one per database)');

# A database without the extension gets no lasting reaper.
sleep 2;
is(reaper_of($node, 'without_ext'), '', 'no reaper where the extension is absent');

# CREATE EXTENSION while the server runs.
$node->safe_psql('without_ext', 'CREATE EXTENSION hopper');
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE datname = 'without_ext' "
		  . "AND application_name = 'hopper reaper: preload'", 10),
	'CREATE EXTENSION in another database gets it a reaper of its own');
is( $node->safe_psql('with_ext', 'SELECT count(*) FROM hopper.reaper_status()'),
	'2', 'reaper_status lists the reapers of every database');

# A reaper that disappears is replaced by the launcher within its scan interval (10 s).
my ($old) = split /\|/, reaper_of($node, 'with_ext');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($old)");
$took = wait_until($node, 'postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE datname = 'with_ext' "
	  . "AND application_name = 'hopper reaper: preload' AND pid <> $old", 20);
ok(defined $took, 'a terminated reaper is replaced by the launcher');
note sprintf('replacement reaper after %.3f s', $took // -1);

# The replacement lost too, before the launcher's next scan: it is replaced at that scan as well,
# not taken for a reaper that found no extension (those are retried only after a minute).
my ($second) = split /\|/, reaper_of($node, 'with_ext');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($second)");
$took = wait_until($node, 'postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE datname = 'with_ext' "
	  . "AND application_name = 'hopper reaper: preload' AND pid NOT IN ($old, $second)", 15);
ok(defined $took, 'a reaper lost within a scan of its start is replaced at the next scan');
note sprintf('second replacement after %.3f s', $took // -1);

# Crash recovery in this mode too.
{
	my $s = start_session($node, 'with_ext');
	my $id = $node->safe_psql('with_ext', "SELECT hopper.queue_push('p', '{}')");
	session_query($s, "SELECT id FROM hopper.queue_pull('p', 1, lease => '1 hour', session_bound => true)");
	my $t0 = time;
	kill 'KILL', session_client_pid($s);
	eval { $s->{run}->finish };
	my $t = wait_until($node, 'with_ext', "SELECT state = 'available' FROM hopper.job_status($id)", 10);
	my $elapsed = defined $t ? rescued_after($node, 'with_ext', $id, $t0) : undef;
	ok(defined $elapsed && $elapsed < 2, 'preload: a killed client\'s session-bound job is back within 2 s');
	note sprintf('preload, client kill -9: rescued %.3f s after the kill', $elapsed // -1);
}

# reaper_stop keeps it stopped: the launcher does not bring it back.
is($node->safe_psql('with_ext', 'SELECT hopper.reaper_stop()'), 't', 'reaper_stop stops it');
sleep 11;    # longer than the launcher's scan interval
is(reaper_of($node, 'with_ext'), '', 'a stopped reaper stays stopped');
is($node->safe_psql('with_ext', 'SELECT hopper.reaper_start()'), 't', 'reaper_start starts it again');
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE datname = 'with_ext' "
		  . "AND application_name = 'hopper reaper: preload'", 10),
	'and it runs');

# hopper.reaper_enabled = off: every reaper exits, the launcher starts none.
$node->append_conf('postgresql.conf', "hopper.reaper_enabled = off\n");
$node->reload;
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE backend_type = 'hopper reaper'", 10),
	'hopper.reaper_enabled = off stops every reaper');

# DROP EXTENSION: its reaper leaves.
$node->append_conf('postgresql.conf', "hopper.reaper_enabled = on\n");
$node->reload;
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE datname = 'without_ext' "
		  . "AND application_name = 'hopper reaper: preload'", 20),
	'back on: the launcher starts the reapers again');

# A database whose transactions are read-only by default: its reaper leaves at start-up rather
# than failing there every second (which kept it connected, and DROP DATABASE failed).
$node->safe_psql('postgres', 'CREATE DATABASE read_only');
$node->safe_psql('read_only', 'CREATE EXTENSION hopper');
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE datname = 'read_only' "
		  . "AND application_name = 'hopper reaper: preload'", 10),
	'the database to be made read-only has a reaper');
$node->safe_psql('postgres', 'ALTER DATABASE read_only SET default_transaction_read_only = on');
my ($ro) = split /\|/, reaper_of($node, 'read_only');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($ro)");
my $left;
for (1 .. 300) {
	last if $left = slurp_file($node->logfile) =~ /hopper reaper exits: transactions in this database are read-only/;
	usleep(100_000);
}
ok($left, 'a reaper started in a read-only database leaves');
$node->safe_psql('postgres', 'DROP DATABASE read_only');
pass('and the read-only database can be dropped');
unlike(slurp_file($node->logfile), qr/hopper reaper start-up failed/,
	'no failed start-up in the read-only database');

# A long prune (400,000 rows past their retention, 10 a transaction) steps aside for DROP
# DATABASE between its batches, as a rescue does.
$node->safe_psql('postgres', 'CREATE DATABASE pruning');
$node->safe_psql('pruning', 'CREATE EXTENSION hopper');
$node->safe_psql('pruning', "SELECT hopper.reaper_stop(); SELECT hopper.queue_create('old', retention => '1 day')");
$node->safe_psql('pruning', q{
	INSERT INTO hopper.job_history (id, queue, state, priority, run_at, attempt, max_attempts,
		created_at, finished_at, payload)
	SELECT g, 'old', 'completed', 0, now() - interval '2 days', 1, 5, now() - interval '2 days',
		now() - interval '2 days', '{}'
	FROM generate_series(1, 400000) g});
$node->append_conf('postgresql.conf', "hopper.reaper_batch_size = 10\n");
$node->reload;
$node->safe_psql('pruning', 'SELECT hopper.reaper_start()');
ok(defined wait_until($node, 'pruning',
		"SELECT count(*) < 399000 FROM hopper.job_history", 20),
	'the reaper prunes the old rows');
my $t0 = time;
$node->safe_psql('postgres', 'DROP DATABASE pruning');
note sprintf('DROP DATABASE during a prune took %.3f s', time - $t0);
pass('DROP DATABASE succeeds while the reaper prunes');
$node->append_conf('postgresql.conf', "hopper.reaper_batch_size = 1000\n");
$node->reload;

$node->safe_psql('without_ext', 'DROP EXTENSION hopper');
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE datname = 'without_ext' "
		  . "AND backend_type = 'hopper reaper'", 10),
	'DROP EXTENSION makes the reaper exit');
$node->safe_psql('postgres', 'DROP DATABASE without_ext');
$node->safe_psql('postgres', 'DROP DATABASE with_ext');
pass('both databases dropped');

my $log = slurp_file($node->logfile);
unlike($log, qr/server process .* was terminated by signal|TRAP:/, 'no server crash');
$node->stop;
done_testing();
