# The reaper without shared_preload_libraries: started by CREATE EXTENSION, rescuing crashed
# session-bound jobs and expired leases within seconds, pruning history, brought back by a push
# after a server restart, and out of the way of DROP EXTENSION and DROP DATABASE.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('dynamic');
$node->init;
$node->append_conf('postgresql.conf', "hopper.reaper_prune_interval = '1s'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION hopper');

my $took = wait_until($node, 'app',
	"SELECT count(*) = 1 FROM hopper.reaper_status() WHERE database = 'app' AND last_run IS NOT NULL");
ok(defined $took, 'CREATE EXTENSION starts a reaper');
like(reaper_of($node, 'app'), qr/^\d+\|dynamic$/, 'one reaper, in dynamic mode');

# A session-bound job is rescued as soon as the backend that pulled it is gone.
sub check_rescued_from_gone_backend
{
	my ($how, $kill) = @_;
	my $s = start_session($node, 'app');
	my $backend = session_backend_pid($s);
	my $id = $node->safe_psql('app', "SELECT hopper.queue_push('crash', '{\"how\": \"$how\"}')");
	my ($pulled, $token) = split /\|/,
	  session_query($s,
		"SELECT id, lease_token FROM hopper.queue_pull('crash', 1, lease => '1 hour', worker => 'w-$how', session_bound => true)");
	is($pulled, $id, "$how: the session pulled the job");
	my $t0 = time;
	$kill->($s, $backend);
	my $took = wait_until($node, 'app',
		"SELECT state = 'available' FROM hopper.job_status($id)", 10);
	my $elapsed = defined $took ? rescued_after($node, 'app', $id, $t0) : undef;
	ok(defined $elapsed && $elapsed < 2, "$how: job available again within 2 s");
	note sprintf('%s: rescued %.3f s after the kill (lease was 1 hour)', $how, $elapsed // -1);
	is( $node->safe_psql('app',
			"SELECT attempt || '|' || last_error || '|' || (errors->-1->>'worker') FROM hopper.job_status($id)"),
		"1|worker backend gone (pid $backend)|w-$how",
		"$how: attempt counted, error names the backend");
	is( $node->safe_psql('app',
			"SELECT hopper.queue_heartbeat($id, $token) || '|' || hopper.queue_complete($id, $token)"),
		'false|false', "$how: the stale holder can neither heartbeat nor complete");
	my ($again) = $node->safe_psql('app',
		"SELECT attempt FROM hopper.queue_pull('crash', 1) WHERE id = $id");
	is($again, 2, "$how: the next pull gets it as attempt 2");
	$node->safe_psql('app', "SELECT hopper.queue_cancel($id)");
	return $elapsed;
}

my $t_term = check_rescued_from_gone_backend(
	'pg_terminate_backend',
	sub {
		my ($s, $backend) = @_;
		$node->safe_psql('app', "SELECT pg_terminate_backend($backend)");
		eval { $s->{run}->finish };
	});
my $t_kill9 = check_rescued_from_gone_backend(
	'client kill -9',
	sub {
		my ($s, $backend) = @_;
		kill 'KILL', session_client_pid($s);
		eval { $s->{run}->finish };
	});

# A plain (not session-bound) pull of a crashed session waits for its lease.
{
	my $s = start_session($node, 'app');
	my $id = $node->safe_psql('app', "SELECT hopper.queue_push('crash', '{}')");
	session_query($s, "SELECT id FROM hopper.queue_pull('crash', 1, lease => '1 hour')");
	kill 'KILL', session_client_pid($s);
	eval { $s->{run}->finish };
	sleep 2;
	is($node->safe_psql('app', "SELECT state FROM hopper.job_status($id)"),
		'running', 'without session_bound a crashed worker\'s job waits for its lease');
	$node->safe_psql('app', "SELECT hopper.queue_cancel($id)");
}

# LISTENing workers are woken by the reaper when a scheduled job comes due, and when a crashed
# session-bound job is back.
{
	my ($reaper) = split /\|/, reaper_of($node, 'app');
	my $l = start_session($node, 'app');
	session_query($l, 'LISTEN "hopper:wake"');
	$node->safe_psql('app',
		"SELECT hopper.queue_push('wake', '{}', run_at => now() + interval '2 seconds')");
	# A job pushed for later is announced when it comes due, not at its push.
	session_query($l, 'SELECT 1');
	my ($heard, $t0) = ('', time);
	while (time - $t0 < 6 && $heard !~ /notification/)
	{
		usleep(100_000);
		$heard = session_query($l, 'SELECT 1');
	}
	like($heard, qr/Asynchronous notification "hopper:wake" received from server process with PID $reaper/,
		'the reaper notifies when the scheduled job comes due');
	note sprintf('scheduled job: reaper NOTIFY heard %.3f s after the push (run_at + 2 s)', time - $t0);

	my $s = start_session($node, 'app');
	$node->safe_psql('app', "SELECT hopper.queue_push('wake', '{}')");
	ok(scalar(wait_notification($l, 'hopper:wake', 5)), 'the push is announced');
	session_query($s, "SELECT id FROM hopper.queue_pull('wake', 1, session_bound => true)");
	kill 'KILL', session_client_pid($s);
	eval { $s->{run}->finish };
	($heard, $t0) = ('', time);
	while (time - $t0 < 5 && $heard !~ /notification/)
	{
		usleep(100_000);
		$heard = session_query($l, 'SELECT 1');
	}
	like($heard, qr/Asynchronous notification "hopper:wake" received from server process with PID $reaper/,
		'the reaper notifies when a crashed worker\'s job is back');
	$l->{in} .= "\\q\n";
	$l->{run}->finish;
}

# An expired lease is rescued within lease + 2 s, with the queue's backoff.
{
	my $id = $node->safe_psql('app', "SELECT hopper.queue_push('leases', '{}')");
	my $t0 = time;
	my ($pulled, $token) = split /\|/, $node->safe_psql('app',
		"SELECT id, lease_token FROM hopper.queue_pull('leases', 1, lease => '2 seconds', worker => 'w-slow')");
	my $took = wait_until($node, 'app',
		"SELECT state <> 'running' FROM hopper.job_status($id)", 15);
	my $elapsed = defined $took ? rescued_after($node, 'app', $id, $t0) : undef;
	ok(defined $elapsed && $elapsed < 2 + 2, 'expired lease rescued within lease + 2 s');
	note sprintf('expired lease: rescued %.3f s after the pull (lease 2 s)', $elapsed // -1);
	is( $node->safe_psql('app',
			"SELECT state IN ('available', 'scheduled') AND attempt = 1 AND last_error = 'lease expired (worker w-slow)' FROM hopper.job_status($id)"),
		't', 'back with the attempt counted and the error logged');
	is( $node->safe_psql('app',
			"SELECT hopper.queue_heartbeat($id, $token) || '|' || hopper.queue_complete($id, $token) || '|' || (hopper.queue_fail($id, $token, 'late') IS NULL)"),
		'false|false|true', 'the stale holder is fenced off');
}

# Retention: rows past their queue's retention, and whole daily partitions past the longest one.
{
	$node->safe_psql('app', "SELECT hopper.queue_create('brief', retention => '1 second')");
	my $id = $node->safe_psql('app', "SELECT hopper.queue_push('brief', '{}')");
	$node->safe_psql('app',
		"SELECT hopper.queue_complete(id, lease_token) FROM hopper.queue_pull('brief', 1)");
	my $kept = $node->safe_psql('app',
		"SELECT hopper.queue_push('crash', '{}')");    # a queue with the default 7 days
	$node->safe_psql('app',
		"SELECT hopper.queue_complete(id, lease_token) FROM hopper.queue_pull('crash', 1) WHERE id = $kept");
	$node->safe_psql('app', q{
		CREATE TABLE hopper.job_history_p20200101 PARTITION OF hopper.job_history
			FOR VALUES FROM ('2020-01-01 00:00:00+00') TO ('2020-01-02 00:00:00+00');
		INSERT INTO hopper.job_history (id, queue, state, priority, run_at, attempt, max_attempts,
			created_at, finished_at, payload)
		VALUES (-1, 'crash', 'completed', 0, '2020-01-01 10:00+00', 1, 5, '2020-01-01 10:00+00',
			'2020-01-01 10:00:01+00', '{}');
	});
	ok(defined wait_until($node, 'app',
			"SELECT to_regclass('hopper.job_history_p20200101') IS NULL", 20),
		'a daily partition older than every retention is dropped');
	ok(defined wait_until($node, 'app',
			"SELECT NOT EXISTS (SELECT 1 FROM hopper.job_history WHERE id = $id)", 20),
		'a finished job past its queue\'s retention is deleted');
	is($node->safe_psql('app', "SELECT state FROM hopper.job_status($kept)"),
		'completed', 'a finished job within its retention stays');
	ok($node->safe_psql('app',
			"SELECT jobs_pruned >= 2 FROM hopper.reaper_status() WHERE database = 'app'") eq 't',
		'reaper_status counts the pruned rows');
	ok($node->safe_psql('app',
			"SELECT count(*) >= 7 FROM pg_inherits WHERE inhparent = 'hopper.job_history'::regclass "
			  . "AND inhrelid::regclass::text LIKE 'hopper.job_history_p%'") eq 't',
		'upcoming daily partitions are kept');
	is( $node->safe_psql('app',
			"SELECT count(*) FROM pg_inherits i JOIN pg_depend d ON d.objid = i.inhrelid AND d.deptype = 'e' "
			  . "WHERE i.inhparent = 'hopper.job_history'::regclass "
			  . "AND i.inhrelid::regclass::text LIKE 'hopper.job_history_p%'"),
		$node->safe_psql('app',
			"SELECT count(*) FROM pg_inherits WHERE inhparent = 'hopper.job_history'::regclass "
			  . "AND inhrelid::regclass::text LIKE 'hopper.job_history_p%'"),
		'every daily partition, made by the install or by the reaper, belongs to the extension');
}

# Partitions that belong to the extension (those CREATE EXTENSION made, say) are dropped too once
# expired: the extension refused their DROP, which ended every retention run from then on, rows
# of short-retention queues included.
{
	my $id = $node->safe_psql('app', "SELECT hopper.queue_push('brief', '{}')");
	$node->safe_psql('app', q{
		CREATE TABLE hopper.job_history_p20200103 PARTITION OF hopper.job_history
			FOR VALUES FROM ('2020-01-03 00:00:00+00') TO ('2020-01-04 00:00:00+00');
		ALTER EXTENSION hopper ADD TABLE hopper.job_history_p20200103;
	});
	$node->safe_psql('app',
		"SELECT hopper.queue_complete(id, lease_token) FROM hopper.queue_pull('brief', 1)");
	ok(defined wait_until($node, 'app',
			"SELECT to_regclass('hopper.job_history_p20200103') IS NULL", 20),
		'an expired partition that belongs to the extension is dropped');
	ok(defined wait_until($node, 'app',
			"SELECT NOT EXISTS (SELECT 1 FROM hopper.job_history WHERE id = $id)", 20),
		'and the rows of short retentions are still pruned');
}

# A retention is a fixed length, whatever the calendar or the TimeZone: '1 year' is 360 days
# (12 months of 30), as it is checked. A row 359 days old is kept, and its day's partition with
# it; one 361 days old is pruned, though a year back on the calendar would still keep it.
{
	$node->safe_psql('app', "SELECT hopper.queue_create('yearly', retention => '1 year')");
	my ($kept_day, $gone_day) = split /\|/, $node->safe_psql('app',
		"SELECT to_char(((now() - interval '359 days') AT TIME ZONE 'UTC')::date, 'YYYYMMDD') "
		  . "|| '|' || to_char(((now() - interval '361 days') AT TIME ZONE 'UTC')::date, 'YYYYMMDD')");
	$node->safe_psql('app', qq{
		DO \$\$
		DECLARE d date;
		BEGIN
			FOREACH d IN ARRAY ARRAY[to_date('$kept_day', 'YYYYMMDD'), to_date('$gone_day', 'YYYYMMDD')]
			LOOP
				EXECUTE format('CREATE TABLE IF NOT EXISTS hopper.%I PARTITION OF hopper.job_history '
					'FOR VALUES FROM (%L) TO (%L)', 'job_history_p' || to_char(d, 'YYYYMMDD'),
					d::text || ' 00:00:00+00', (d + 1)::text || ' 00:00:00+00');
			END LOOP;
		END \$\$;
		INSERT INTO hopper.job_history (id, queue, state, priority, run_at, attempt, max_attempts,
			created_at, finished_at, payload)
		VALUES (-2, 'yearly', 'completed', 0, now(), 1, 5, now(), now() - interval '359 days', '{}'),
			(-3, 'yearly', 'completed', 0, now(), 1, 5, now(), now() - interval '361 days', '{}');
	});
	# Three prune runs at least (one a second).
	sleep 4;
	is($node->safe_psql('app', "SELECT count(*) FROM hopper.job_history WHERE id = -2"),
		'1', 'a row within a retention of 1 year (360 days) is kept');
	is($node->safe_psql('app', "SELECT to_regclass('hopper.job_history_p$kept_day') IS NOT NULL"),
		't', 'its day\'s partition is kept');
	is($node->safe_psql('app', "SELECT count(*) FROM hopper.job_history WHERE id = -3"),
		'0', 'a row 361 days old is pruned: a year of retention is 360 days, not the calendar\'s');
	$node->safe_psql('app', "SELECT hopper.queue_drop('yearly')");
}

# A past day's partition that holds no row goes, whatever the retentions: a queue of '1 year' that
# never finished a job kept every day's partition for a year, empty or not, and every read of the
# history that cannot leave days out (a job by id) planned, locked and read them all. A day whose
# rows its queues' retentions pruned goes; a day that holds a row stays, and so does one that a
# transaction still in flight wrote a row into (the drop waits for it no longer than the reaper's
# lock timeout); a finish for a day gone lands in the default partition.
{
	$node->safe_psql('app', "SELECT hopper.queue_create('unused_long', retention => '1 year')");
	my %day = map {
		$_ => $node->safe_psql('app',
			"SELECT to_char((now() AT TIME ZONE 'UTC')::date - $_, 'YYYYMMDD')")
	} (0, 2, 3, 4, 5);
	my $row = sub {
		my ($id, $queue, $back) = @_;
		return "INSERT INTO hopper.job_history (id, queue, state, priority, run_at, attempt, "
		  . "max_attempts, created_at, finished_at, payload) VALUES ($id, '$queue', 'completed', 0, "
		  . "'2020-01-01', 1, 5, '2020-01-01', to_date('$day{$back}', 'YYYYMMDD') + time '12:00' "
		  . "AT TIME ZONE 'UTC', '{}');";
	};
	# Each day made with its rows, in one transaction: an empty day could go before they came.
	$node->safe_psql('app', join "\n",
		(map {
			"CREATE TABLE hopper.job_history_p$day{$_} PARTITION OF hopper.job_history FOR VALUES "
			  . "FROM ('" . $day{$_} . " 00:00+00') TO ('"
			  . $node->safe_psql('app', "SELECT to_date('$day{$_}', 'YYYYMMDD') + 1") . " 00:00+00');"
		} (2, 3, 4, 5)),
		$row->(-11, 'brief', 3),     # past its 1 second: pruned, and then its day goes
		$row->(-12, 'crash', 5),     # within its 7 days: its day stays
		$row->(-13, 'crash', 2));    # taken out below, while a transaction writes another
	my $gone = sub { "SELECT to_regclass('hopper.job_history_p$day{$_[0]}') IS NULL" };
	ok(defined wait_until($node, 'app', $gone->(4), 20),
		'a past day that holds no row is dropped beside a retention of a year');
	ok(defined wait_until($node, 'app', $gone->(3), 20),
		'so is a past day whose rows were pruned');
	is($node->safe_psql('app', $gone->(5)), 'f', 'a past day that holds a row stays');
	is($node->safe_psql('app', $gone->(0)), 'f', 'today stays');

	# A drop locks the whole history: while a transaction holds it (any write of history does),
	# no empty day goes.
	my $s = start_session($node, 'app');
	session_query($s, "BEGIN; " . $row->(-14, 'crash', 2));
	$node->safe_psql('app', 'DELETE FROM hopper.job_history WHERE id = -13');
	# Three prune runs at least (one a second).
	sleep 4;
	is($node->safe_psql('app', $gone->(2)), 'f',
		'a past day with a row written by a transaction in flight stays');
	session_query($s, 'COMMIT');
	sleep 3;
	is($node->safe_psql('app',
			"SELECT tableoid::regclass::text FROM hopper.job_history WHERE id = -14"),
		"hopper.job_history_p$day{2}", 'and its row, once committed, is there');
	my $busy = "job_history_p$day{2}";
	like(slurp_file($node->logfile),
		qr/dropping empty history partition $busy failed: .*lock timeout/,
		'the drop gave up its wait for the history\'s lock');

	$node->safe_psql('app', $row->(-15, 'crash', 4));
	is($node->safe_psql('app',
			"SELECT tableoid::regclass::text FROM hopper.job_history WHERE id = -15"),
		'hopper.job_history_default', 'a finish for a day gone lands in the default partition');

	$node->safe_psql('app', 'DELETE FROM hopper.job_history WHERE id IN (-12, -14, -15)');
	ok(defined wait_until($node, 'app', "SELECT (" . $gone->(5) . ") AND (" . $gone->(2) . ")", 20),
		'days emptied by a delete go too');
	$s->{in} .= "\\q\n";
	$s->{run}->finish;
	$node->safe_psql('app', "SELECT hopper.queue_drop('unused_long')");
}

# After a restart nothing runs until the first push or pull.
$node->restart;
is(reaper_of($node, 'app'), '', 'no reaper after a restart without preload');
$node->safe_psql('app', "SELECT hopper.queue_push('crash', '{}')");
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE datname = 'app' "
		  . "AND application_name = 'hopper reaper: dynamic'", 10),
	'a push brings the reaper back');

# DROP DATABASE does not wait for the reaper (it steps aside), nor does DROP EXTENSION.
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION hopper');
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE datname = 'other' "
		  . "AND application_name LIKE 'hopper reaper: %'", 10),
	'the second database has its own reaper');
my $t0 = time;
$node->safe_psql('postgres', 'DROP DATABASE other');
note sprintf('DROP DATABASE with a running reaper took %.3f s', time - $t0);
pass('DROP DATABASE succeeds while a reaper serves the database');

$node->safe_psql('app', 'DROP EXTENSION hopper');
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE datname = 'app' AND backend_type = 'hopper reaper'", 10),
	'DROP EXTENSION makes the reaper exit');
$node->safe_psql('postgres', 'DROP DATABASE app');

my $log = slurp_file($node->logfile);
unlike($log, qr/server process .* was terminated by signal|TRAP:/, 'no server crash');
$node->stop;
done_testing();
