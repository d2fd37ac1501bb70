# Helpers shared by hopper's TAP tests (test/t/*.pl).
package HopperTAP;

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use Exporter 'import';
our @EXPORT = qw(wait_until reaper_runs reaper_of session_query session_send session_result start_session
  session_backend_pid session_client_pid rescued_after wait_notification race_node drain_ahead
  drain_queues finished_once amcheck_ok run_scripts rows_digest);

# A started node for the race tests: synchronous_commit off (the races are about interleavings, not
# flushes), and a database `app` with the extension.
sub race_node
{
	my ($name) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init;
	$node->append_conf('postgresql.conf', "synchronous_commit = off\n");
	$node->start;
	$node->safe_psql('postgres', 'CREATE DATABASE app');
	$node->safe_psql('app', 'CREATE EXTENSION hopper');
	return $node;
}

# Pulls and completes what is left of $queue in $rounds statements of $n jobs, with the clock
# `$ahead` ahead (`at`): jobs put back after a retry backoff are due by then, and leases held
# that long have expired (a pull short of its n rescues them).
sub drain_ahead
{
	my ($node, $db, $queue, $n, $rounds, $ahead) = @_;
	my $drain = "SELECT count(*) FROM hopper.queue_pull('$queue', $n, at => now() + interval '$ahead') j "
	  . "WHERE hopper.queue_complete(j.id, j.lease_token);\n";
	# A string repeated, not a list: safe_psql takes named parameters after the SQL.
	$node->safe_psql($db, $drain x $rounds);
}

# pg_amcheck over schema hopper of database `app`: heap and TOAST pages, every B-tree index and
# every heap row looked up in it; with $writable (not on a standby) also each index's parent-child
# links, and each row looked up from the root.
sub amcheck_ok
{
	my ($node, $what, $writable) = @_;
	my @cmd = ('pg_amcheck', '--host', $node->host, '--port', $node->port, '--database', 'app',
		'--schema', 'hopper', '--heapallindexed');
	push @cmd, '--parent-check', '--rootdescend' if $writable;
	my ($out, $err) = run_command(\@cmd);
	is($? >> 8, 0, "$what: pg_amcheck finds nothing wrong") or diag("$out\n$err");
}

# Runs pgbench on database `app` of $node with the scripts of %$scripts (name => text), each
# weighted by %$weight (1 when absent), for $seconds with $clients clients, and passes if it
# processed transactions, none failed (a deadlock or serialization failure counts) and printed no
# error. @define: pgbench --define settings ("name=value").
sub run_scripts
{
	my ($node, $name, $clients, $seconds, $scripts, $weight, @define) = @_;
	local $Test::Builder::Level = $Test::Builder::Level + 1;
	$node->pgbench(
		join(' ',
			'--no-vacuum', '--verbose-errors', "--client=$clients", '--jobs=2', "--time=$seconds",
			(map { "--define=$_" } @define),
			'--host=' . $node->host, '--port=' . $node->port),
		0,
		[qr{processed: [1-9]}, qr{number of failed transactions: 0 }],
		[qr{^$}],
		$name,
		{ map { ("$_\@" . ($weight->{$_} // 1) => $scripts->{$_}) } keys %$scripts },
		'app');
}

# One statement giving, for each of @tables (schema-qualified), its row count and a digest of
# its rows in a fixed order: two servers that answer it alike hold the same rows.
sub rows_digest
{
	my @tables = @_;
	return 'SELECT * FROM ('
	  . join(" UNION ALL\n",
		map { "SELECT '$_', count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM $_ t" }
		  @tables)
	  . ') d ORDER BY 1';
}

# Drains @queues (rows and packed jobs) with drain_ahead two hours ahead until nothing is left or
# 50 rounds have passed; returns how many jobs are left.
sub drain_queues
{
	my ($node, $db, @queues) = @_;
	my $in = join(', ', map { "'$_'" } @queues);
	my $left = "SELECT (SELECT count(*) FROM hopper.jobs WHERE queue IN ($in)) + (SELECT "
	  . "coalesce(sum(cardinality(ids) - taken), 0) FROM hopper.job_batches WHERE queue IN ($in))";
	for (my $i = 0; $i < 50 && $node->safe_psql($db, $left) ne '0'; $i++)
	{
		drain_ahead($node, $db, $_, 1000, 10, '2 hours') for @queues;
	}
	return $node->safe_psql($db, $left);
}

# Two checks: the ids in table `pushed` are the jobs in the history of @queues, no more and no
# fewer, and each of them finished once.
sub finished_once
{
	my ($node, $db, $what, @queues) = @_;
	my $in = join(', ', map { "'$_'" } @queues);
	is( $node->safe_psql($db,
			"SELECT count(*) FROM (SELECT DISTINCT id FROM pushed) p FULL JOIN "
			  . "(SELECT id FROM hopper.job_history WHERE queue IN ($in)) h USING (id) "
			  . "WHERE p.id IS NULL OR h.id IS NULL"),
		'0', "$what: every job pushed is in history, and nothing else is");
	is( $node->safe_psql($db,
			"SELECT count(*) - count(DISTINCT id) FROM hopper.job_history WHERE queue IN ($in)"),
		'0', "$what: each of them finished once");
}

# Runs $sql (returning one boolean) every 50 ms until it returns 't' or $timeout seconds passed.
# Returns the seconds it took, or undef on timeout.
sub wait_until
{
	my ($node, $db, $sql, $timeout) = @_;
	$timeout //= 30;
	my $t0 = time;
	while (time - $t0 < $timeout)
	{
		my ($rc, $out) = $node->psql($db, $sql);
		return time - $t0 if $rc == 0 && $out eq 't';
		usleep(50_000);
	}
	return undef;
}

# Waits until the reaper of database $db has finished a pass; returns what wait_until returns.
sub reaper_runs
{
	my ($node, $db) = @_;
	return wait_until($node, $db,
		"SELECT count(*) = 1 FROM hopper.reaper_status() WHERE last_run IS NOT NULL");
}

# Seconds from the epoch time $t0 to the rescue of job $id, as the job's error log records it (the
# rescuing transaction's start), so that the polling of the test does not count.
sub rescued_after
{
	my ($node, $db, $id, $t0) = @_;
	my $at = $node->safe_psql($db,
		"SELECT extract(epoch FROM (errors->-1->>'at')::timestamptz) FROM hopper.job_status($id)");
	return $at eq '' ? undef : $at - $t0;
}

# The reaper of database $db as "pid|mode", or '' if none runs, read from another database
# ($via) so that it works whether or not $db has the extension.
sub reaper_of
{
	my ($node, $db, $via) = @_;
	return $node->safe_psql($via // 'postgres',
		"SELECT string_agg(pid || '|' || substr(application_name, 16), ',') FROM pg_stat_activity "
		  . "WHERE backend_type = 'hopper reaper' AND datname = '$db' "
		  . "AND application_name LIKE 'hopper reaper: %'");
}

# A long-lived psql session (a client process the test can kill) with a simple query method.
sub start_session
{
	my ($node, $db) = @_;
	my %s = (in => '', out => '', err => '', n => 0);
	$s{timeout} = IPC::Run::timer($PostgreSQL::Test::Utils::timeout_default);
	$s{run} = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr($db), '-f', '-' ],
		'<', \$s{in}, '>', \$s{out}, '2>', \$s{err}, $s{timeout});
	return \%s;
}

# Sends $sql and returns its output (rows as psql -At prints them); dies on an error.
sub session_query
{
	my ($s, $sql) = @_;
	session_send($s, $sql);
	return session_result($s);
}

# Sends $sql without waiting for it (a statement that blocks, say); session_result collects it.
sub session_send
{
	my ($s, $sql) = @_;
	$s->{mark} = "__hopper_done_" . ++$s->{n} . "__";
	$s->{out} = '';
	$s->{in} .= "$sql;\n\\echo $s->{mark}\n";
	$s->{sql} = $sql;
	$s->{run}->pump_nb;
}

# The output of the statement session_send sent, once it has finished; dies on an error.
sub session_result
{
	my ($s) = @_;
	my $mark = $s->{mark};
	$s->{timeout}->start($PostgreSQL::Test::Utils::timeout_default);
	$s->{run}->pump until $s->{out} =~ /$mark\n/ || $s->{err} ne '' || $s->{timeout}->is_expired;
	die "session query failed: $s->{err}" if $s->{err} ne '';
	die "session query timed out: $s->{sql}" if $s->{timeout}->is_expired;
	(my $out = $s->{out}) =~ s/\n?$mark\n//;
	return $out;
}

sub session_backend_pid
{
	my ($s) = @_;
	return session_query($s, 'SELECT pg_backend_pid()');
}

# Polls LISTENing session $s every 5 ms until a notification on $channel arrives or $timeout
# seconds pass. Returns (seconds waited, pid of the sending backend), or () on timeout. psql
# prints a notification after the next command it runs, so the wait is at most 5 ms too long.
sub wait_notification
{
	my ($s, $channel, $timeout) = @_;
	my $t0 = time;
	while (1)
	{
		my $out = session_query($s, 'SELECT 1');
		return (time - $t0, $1)
		  if $out =~ /Asynchronous notification "\Q$channel\E" received from server process with PID (\d+)/
		  || $out =~ /Asynchronous notification "\Q$channel\E" with payload ".*" received from server process with PID (\d+)/;
		return () if time - $t0 >= $timeout;
		usleep(5_000);
	}
}

# The pid of the psql client process itself.
sub session_client_pid
{
	my ($s) = @_;
	return $s->{run}->{KIDS}->[0]->{PID};
}

1;
