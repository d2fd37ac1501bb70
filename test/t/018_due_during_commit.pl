# A job that falls due while its push (or its failure's retry) is committing is announced. The push
# judges at pre-commit that the job is not due yet and leaves it to the reaper; a commit that then
# waits (here for a synchronous standby that never answers, until the wait is cancelled and the
# transaction stays committed locally) becomes visible only after the reaper's look at that time,
# and the reaper's next looks start after it. Before, neither LISTENers nor waiting pulls ever
# heard of such a job (the pull found it at its next look, a second later).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('due_commit');
$node->init(allows_streaming => 1);
# Commits wait for a standby only where a session asks for it (synchronous_commit = on).
$node->append_conf('postgresql.conf',
	"synchronous_standby_names = 'nobody'\nsynchronous_commit = local\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hopper');
ok(defined reaper_runs($node, 'postgres'), 'the reaper runs');
$node->safe_psql('postgres', "SELECT hopper.queue_create('slow', lease => '1 hour')");

my $l = start_session($node, 'postgres');
session_query($l, 'LISTEN "hopper:slow"');

# Runs $sql in a session of its own with synchronous_commit on, so that its commit waits; once
# $sql's run_at has passed and the reaper has looked (2.5 s), cancels the wait: the transaction
# is committed locally. Returns the time the commit became visible (when the session ended).
sub commit_late
{
	my ($sql) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c', 'SET synchronous_commit = on',
			'-c', "SELECT 'late', ($sql)" ],
		'>', \$out, '2>', \$err);
	usleep(2_500_000);
	is( $node->safe_psql('postgres',
			"SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity "
			  . "WHERE wait_event = 'SyncRep' AND query LIKE '%''late''%'"),
		'1', 'the commit was waiting for the standby')
	  or diag("$out\n$err");
	$h->finish;
	my $t = time;
	like($err, qr/committed locally/, 'committed locally') or diag($err);
	return $t;
}

# A push of a job due in a second.
{
	session_query($l, 'SELECT 1');    # nothing heard before
	commit_late("SELECT hopper.queue_push('slow', '{}', run_at => now() + interval '1 s')");
	my ($took) = wait_notification($l, 'hopper:slow', 3);
	ok(defined $took, 'a job that fell due during its push\'s commit is announced');
	note sprintf('heard %.3f s after the commit', $took // -1);
	$node->safe_psql('postgres',
		"SELECT hopper.queue_complete(id, lease_token) FROM hopper.queue_pull('slow', 10)");
}

# A failure retried a second later, and a pull waiting on the queue.
{
	$node->safe_psql('postgres', "SELECT hopper.queue_push('slow', '{}')");
	my ($id, $token) = split /\|/,
	  $node->safe_psql('postgres', "SELECT id, lease_token FROM hopper.queue_pull('slow', 1)");
	session_query($l, 'SELECT 1');
	my $w = start_session($node, 'postgres');
	session_send($w,
		"SELECT id, extract(epoch FROM clock_timestamp()) FROM hopper.queue_pull('slow', 1, wait => '10 s')");
	my $committed =
	  commit_late("SELECT hopper.queue_fail($id, $token, 'boom', retry_in => interval '1 s')");
	my ($took) = wait_notification($l, 'hopper:slow', 3);
	ok(defined $took, 'a retry that fell due during its failure\'s commit is announced');
	my ($got, $at) = split /\|/, session_result($w);
	is($got, $id, 'the waiting pull gets the job');
	# Woken by the commit, not by its once-a-second look.
	ok($at - $committed < 0.5, 'the waiting pull is woken at the commit')
	  or diag(sprintf('took %.3f s', $at - $committed));
	$w->{in} .= "\\q\n";
	$w->{run}->finish;
}

$l->{in} .= "\\q\n";
$l->{run}->finish;
$node->stop;
done_testing();
