# queue_pull(..., wait => ...) and queue_take's: a pull that found nothing sleeps until a job is
# made available on its queue. A push wakes one waiting pull per job at its commit, relayed or
# not, with or without hopper.notify; so do a release, a resume, the reaper's pass when a delayed
# job falls due, and on a queue with a concurrency limit whatever frees a slot (a completion, a
# cancel, a failure, a claim rolled back, a limit raised or removed). One whose transaction holds
# a limited queue's lock does not wait at all. A pull that nobody wakes would still find the job
# at its once-a-second recheck, so "woken" is asserted as "returned within 0.3 s of the push",
# five times in a row.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('pull_wait');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hopper');
$node->safe_psql('postgres', "SELECT hopper.queue_create('pw')");
ok(defined reaper_runs($node, 'postgres'),
	'the reaper runs');

my $pull = "SELECT id, extract(epoch FROM pg_catalog.clock_timestamp()) "
  . "FROM hopper.queue_pull('pw', wait => '30 s')";

# Until $n pulls of this test are asleep in their wait.
sub waiting
{
	my ($n) = @_;
	return wait_until($node, 'postgres',
		"SELECT count(*) = $n FROM pg_stat_activity "
		  . "WHERE wait_event_type = 'Extension' AND query LIKE '%wait => %' "
		  . "AND backend_type = 'client backend'");
}

# Pushes one job from session $p and returns the server's clock just before its commit.
sub push_one
{
	my ($p, $sql) = @_;
	$sql //= "SELECT hopper.queue_push('pw', '{}')";
	return session_query($p,
		"SELECT extract(epoch FROM pg_catalog.clock_timestamp()) FROM ($sql) p");
}

# Whether the statement session_send sent to $s has finished, without waiting for it.
sub finished
{
	my ($s) = @_;
	$s->{run}->pump_nb;
	return $s->{out} =~ /$s->{mark}\n/;
}

my $w = start_session($node, 'postgres');
my $p = start_session($node, 'postgres');

my @cases = (
	[ 'relayed by the reaper', '' ],
	[ 'pushed with hopper.notify = off', 'SET hopper.notify = off' ],
	[ 'pushed with hopper.notify_relay = off', 'SET hopper.notify_relay = off' ]);
for my $case (@cases)
{
	my ($name, $set) = @$case;
	session_query($p, 'RESET ALL');
	session_query($p, $set) if $set ne '';
	my @took;
	for my $i (1 .. 5)
	{
		session_send($w, $pull);
		ok(defined waiting(1), "$name, push $i: the pull waits");
		my $pushed_at = push_one($p);
		my ($id, $returned_at) = split /\|/, session_result($w);
		ok(defined $id && $id ne '', "$name, push $i: the waiting pull got the job");
		push @took, ($returned_at // 99) - $pushed_at;
	}
	ok((grep { $_ < 0.3 } @took) == 5, "$name: every waiting pull returned within 0.3 s")
	  or diag "took @took";
	note sprintf('%s: returned %s s after the push', $name,
		join(', ', map { sprintf '%.3f', $_ } @took));
}
session_query($p, 'RESET ALL');

# A push more urgent than the queue's claim position: the commit lowers the position before it
# wakes the pull (PostgreSQL runs commit callbacks last registered first, and a pull woken
# before the position moved resumed past the job that woke it, finding it only at its next look
# a second later: 13 to 23 pushes in 150 took a second). Each round first moves the position to
# priority 10 with a claim, then pushes one job of a lower priority than the last.
{
	session_query($p, "SELECT hopper.queue_create('pw_urgent')");
	my $urgent_pull = "SELECT id, extract(epoch FROM pg_catalog.clock_timestamp()) "
	  . "FROM hopper.queue_pull('pw_urgent', wait => '30 s')";
	my @slow;
	for my $i (1 .. 60)
	{
		session_query($p, "SELECT hopper.queue_push('pw_urgent', '{}', priority => 10)");
		session_query($w, "SELECT count(*) FROM hopper.queue_pull('pw_urgent', 1)");
		session_send($w, $urgent_pull);
		waiting(1);
		my $pushed_at = push_one($p, "SELECT hopper.queue_push('pw_urgent', '{}', priority => -$i)");
		my (undef, $returned_at) = split /\|/, session_result($w);
		my $took = ($returned_at // 99) - $pushed_at;
		push @slow, sprintf('%.3f', $took) if $took >= 0.9;
	}
	is(scalar(@slow), 0, 'a push more urgent than the claim position wakes its pull to it')
	  or diag "pushes that took a second or more: @slow";
}

# One wake-up per job: a batch of two wakes two of three waiting pulls; the third sleeps on
# until the next push.
{
	my @w = map { start_session($node, 'postgres') } 1 .. 3;
	session_send($_, $pull) for @w;
	ok(defined waiting(3), 'three pulls wait');
	push_one($p, "SELECT count(*) FROM hopper.queue_push_batch('pw', ARRAY['{}', '{}']::jsonb[])");
	my $t0 = time;
	usleep(20_000) until (grep { finished($_) } @w) == 2 || time - $t0 > 5;
	is(scalar(grep { finished($_) } @w), 2, 'a batch of two: two pulls return');
	ok(defined waiting(1), 'the third still waits');
	my ($third) = grep { !finished($_) } @w;
	push_one($p);
	my ($id) = split /\|/, session_result($third);
	ok(defined $id && $id ne '', 'the next push wakes the third');
	$_->{in} .= "\\q\n" for @w;
	$_->{run}->finish for @w;
}

# Pushes around savepoints: one rolled back wakes no one, one released wakes as the transaction's
# own do, and a push after a rollback to a savepoint still counts. Three jobs commit, so three
# signals: each of the three waiting pulls returns within 0.3 s.
{
	my @w = map { start_session($node, 'postgres') } 1 .. 3;
	session_send($_, $pull) for @w;
	ok(defined waiting(3), 'savepoints: three pulls wait');
	my $push = "SELECT hopper.queue_push('pw', '{}')";
	my $at = session_query($p,
		"BEGIN; $push; SAVEPOINT a; $push; ROLLBACK TO SAVEPOINT a; $push; SAVEPOINT b; $push; "
		  . "RELEASE SAVEPOINT b; COMMIT; SELECT extract(epoch FROM pg_catalog.clock_timestamp())");
	$at = (split /\n/, $at)[-1];
	my @took;
	for my $s (@w)
	{
		my ($id, $returned_at) = split /\|/, session_result($s);
		push @took, (defined $id && $id ne '' ? $returned_at : 99) - $at;
	}
	ok((grep { $_ < 0.3 } @took) == 3, 'savepoints: each waiting pull got a job within 0.3 s')
	  or diag "took @took";
	$_->{in} .= "\\q\n" for @w;
	$_->{run}->finish for @w;
}

# A waiting queue_take is woken the same way, and its job is completed when the taking
# transaction commits.
{
	session_query($w, 'BEGIN');
	session_send($w,
		"SELECT id, extract(epoch FROM pg_catalog.clock_timestamp()) "
		  . "FROM hopper.queue_take('pw', wait => '30 s')");
	ok(defined waiting(1), 'a take waits');
	my $pushed_at = push_one($p);
	my ($id, $returned_at) = split /\|/, session_result($w);
	ok(defined $id && $id ne '', 'the waiting take got the job');
	ok($returned_at - $pushed_at < 0.3, 'within 0.3 s of the push')
	  or diag sprintf('took %.3f s', $returned_at - $pushed_at);
	session_query($w, 'COMMIT');
	is(session_query($p, "SELECT state FROM hopper.job_status($id)"),
		'completed', 'and completed by the commit');
}

# A paused queue's waiting pull is woken by queue_resume, five times in a row. The resume's
# commit wakes it once it has told every session that the queue's row changed: a pull woken
# before that read the row as its session remembered it, paused, and slept on to its next look.
{
	session_query($p, "SELECT hopper.queue_create('pw_paused')");
	(my $paused_pull = $pull) =~ s/'pw'/'pw_paused'/;
	my @took;
	for my $i (1 .. 5)
	{
		session_query($p,
			"SELECT hopper.queue_pause('pw_paused'); SELECT hopper.queue_push('pw_paused', '{}')");
		session_send($w, $paused_pull);
		ok(defined waiting(1), "resume $i: a pull waits on the paused queue");
		my $resumed_at = push_one($p, "SELECT hopper.queue_resume('pw_paused')");
		my ($id, $returned_at) = split /\|/, session_result($w);
		ok(defined $id && $id ne '', "resume $i: the waiting pull got the job");
		push @took, ($returned_at // 99) - $resumed_at;
	}
	ok((grep { $_ < 0.3 } @took) == 5, 'queue_resume: every waiting pull returned within 0.3 s')
	  or diag "took @took";
}

# A rolled-back push wakes no one to a job: the pull waits on.
session_send($w, $pull);
ok(defined waiting(1), 'a pull waits');
session_query($p, "BEGIN; SELECT hopper.queue_push('pw', '{}'); ROLLBACK");
usleep(300_000);
ok(!finished($w), 'a rolled-back push leaves it waiting');

# A job that another session holds is given back by $action (SQL naming :id and :tok) while a
# pull waits on its queue. Returns the job's id, the id the waiting pull got, and the seconds
# from the action to the pull's return.
sub handed_back
{
	my ($queue, $action) = @_;
	my $holder = start_session($node, 'postgres');
	session_query($holder, "SET hopper.notify = off");
	session_query($holder, "SELECT hopper.queue_create('$queue')");
	session_query($holder, "SELECT hopper.queue_push('$queue', '{}')");
	# Held: claimed by $holder before the waiting pull could see it.
	my ($id, $tok) = split /\|/,
	  session_query($holder, "SELECT id, lease_token FROM hopper.queue_pull('$queue')");
	my $waiter = start_session($node, 'postgres');
	(my $pull_here = $pull) =~ s/'pw'/'$queue'/;
	session_send($waiter, $pull_here);
	ok(defined waiting(2), "a pull waits on $queue");
	(my $sql = $action) =~ s/:id/$id/g;
	$sql =~ s/:tok/$tok/g;
	my $at = session_query($holder,
		"SELECT extract(epoch FROM pg_catalog.clock_timestamp()) FROM $sql");
	my ($got, $returned_at) = split /\|/, session_result($waiter);
	$_->{in} .= "\\q\n" for ($holder, $waiter);
	$_->{run}->finish for ($holder, $waiter);
	return ($id, $got, $returned_at - $at);
}

# A job released by its worker wakes it.
{
	my ($id, $got, $took) = handed_back('pw_held', 'hopper.queue_release(:id, :tok)');
	is($got, $id, 'the released job goes to the waiting pull');
	ok($took < 0.3, 'within 0.3 s of the release') or diag sprintf('took %.3f s', $took);
}
# A failure retried at once (retry_in 0) wakes it too, as a release does; without the wake-up the
# pull found the job at its next look, 0.11-0.13 s later here.
{
	my ($id, $got, $took) =
	  handed_back('pw_failed', "hopper.queue_fail(:id, :tok, 'again', retry_in => '0')");
	is($got, $id, 'the job failed with retry_in 0 goes to the waiting pull');
	ok($took < 0.05, 'within 0.05 s of the failure') or diag sprintf('took %.3f s', $took);
}
# A waiting pull with a kinds filter, woken for a job of another kind, passes the wake-up on to
# the next waiting pull, which takes the job at once (before: at its next look, about 0.5 s on).
{
	my $pusher = start_session($node, 'postgres');
	session_query($pusher, "SELECT hopper.queue_create('pw_kinds')");
	my $asleep = sub {
		"SELECT count(*) = $_[0] FROM pg_stat_activity WHERE wait_event_type = 'Extension' "
		  . "AND query LIKE '%pw_kinds%' AND backend_type = 'client backend'";
	};
	my $filtered = start_session($node, 'postgres');
	session_send($filtered,
		"SELECT count(*) FROM hopper.queue_pull('pw_kinds', kinds => ARRAY['x'], wait => '3 s')");
	ok(defined wait_until($node, 'postgres', $asleep->(1)), 'a pull for kind x waits');
	my $any = start_session($node, 'postgres');
	(my $pull_any = $pull) =~ s/'pw'/'pw_kinds'/;
	session_send($any, $pull_any);
	ok(defined wait_until($node, 'postgres', $asleep->(2)), 'a pull for any kind waits behind it');
	my $pushed_at = session_query($pusher,
		"SELECT extract(epoch FROM pg_catalog.clock_timestamp()) "
		  . "FROM hopper.queue_push('pw_kinds', '{}', kind => 'y')");
	my ($got, $returned_at) = split /\|/, session_result($any);
	ok(defined $got && $got ne '', 'the pull for any kind gets the job of kind y');
	ok($returned_at - $pushed_at < 0.1, 'within 0.1 s of the push')
	  or diag sprintf('took %.3f s', $returned_at - $pushed_at);
	is(session_result($filtered), '0', 'the pull for kind x ends empty');
	$_->{in} .= "\\q\n" for ($pusher, $filtered, $any);
	$_->{run}->finish for ($pusher, $filtered, $any);
}
# (The waiting pull on 'pw' from the rolled-back case is still there.)

# A job pushed for later is handed to the waiting pull when it falls due.
my $due = session_query($p,
	"SELECT extract(epoch FROM s.t) FROM (SELECT pg_catalog.clock_timestamp() + interval '1.5 s' AS t) s, "
	  . "LATERAL hopper.queue_push('pw', '{\"later\": true}', run_at => s.t) p");
my ($later, $returned_at) = split /\|/, session_result($w);
ok(defined $later && $later ne '', 'a job pushed for later reaches the waiting pull');
ok($returned_at >= $due && $returned_at - $due < 2.5,
	'when it falls due (within one reaper naptime and a recheck)')
  or diag sprintf('returned %.3f s after run_at', $returned_at - $due);

# The wait runs out: no rows, after the interval.
my ($t_start) = session_query($w, "SELECT extract(epoch FROM pg_catalog.clock_timestamp())");
my $none = session_query($w, "SELECT id FROM hopper.queue_pull('pw', wait => '0.5 s')");
my ($t_end) = session_query($w, "SELECT extract(epoch FROM pg_catalog.clock_timestamp())");
is($none, '', 'an empty queue: no job when the wait runs out');
ok($t_end - $t_start >= 0.5, 'after the wait');

# A waiting pull is cancelled like any statement, and the session goes on.
session_send($w, $pull);
ok(defined waiting(1), 'a pull waits');
$node->safe_psql('postgres',
	"SELECT pg_cancel_backend(pid) FROM pg_stat_activity "
	  . "WHERE wait_event_type = 'Extension' AND query LIKE '%wait => %'");
my $t0 = time;
$w->{run}->pump until $w->{err} =~ /canceling statement/ || time - $t0 > 10;
like($w->{err}, qr/canceling statement due to user request/, 'cancelled');

# A queue with a concurrency limit: a pull that finds its key full waits, and the completion that
# frees the slot wakes it to the job it could not take.
{
	my $holder = start_session($node, 'postgres');
	my $wl = start_session($node, 'postgres');
	session_query($holder,
		"SELECT hopper.queue_create('pw_slots'); SELECT hopper.queue_set_concurrency('pw_slots', NULL, 1); "
		  . "SELECT count(*) FROM hopper.queue_push_batch('pw_slots', ARRAY['{}', '{}']::jsonb[], "
		  . "concurrency_keys => ARRAY['k', 'k'])");
	my ($id, $tok) = split /\|/,
	  session_query($holder, "SELECT id, lease_token FROM hopper.queue_pull('pw_slots')");
	(my $pull_slots = $pull) =~ s/'pw'/'pw_slots'/;
	session_send($wl, $pull_slots);
	ok(defined waiting(1), 'a pull waits while its key is full');
	my $completed_at = session_query($holder,
		"SELECT extract(epoch FROM pg_catalog.clock_timestamp()) "
		  . "FROM hopper.queue_complete($id, $tok)");
	my ($got, $returned_at) = split /\|/, session_result($wl);
	ok(defined $got && $got ne '' && $got != $id, 'the completion frees the slot for the waiting pull');
	ok($returned_at - $completed_at < 0.3, 'within 0.3 s of the completion')
	  or diag sprintf('took %.3f s', $returned_at - $completed_at);

	# So do a cancel of the running job, and a failure retried later.
	my $held = $got;
	my $held_tok = session_query($holder, "SELECT lease_token FROM hopper.jobs WHERE id = $held");
	for my $case (
		[ 'a cancel', "hopper.queue_cancel($held)" ],
		[ 'a failure retried in an hour', "hopper.queue_fail(:id, :tok, 'x', retry_in => '1 hour')" ])
	{
		my ($name, $call) = @$case;
		session_query($holder, "SELECT hopper.queue_push('pw_slots', '{}', concurrency_key => 'k')");
		session_send($wl, $pull_slots);
		ok(defined waiting(1), "$name: a pull waits while its key is full");
		$call =~ s/:id/$held/;
		$call =~ s/:tok/$held_tok/;
		my $freed_at = session_query($holder,
			"SELECT extract(epoch FROM pg_catalog.clock_timestamp()) FROM (SELECT $call) c");
		my ($next, $next_at) = split /\|/, session_result($wl);
		ok(defined $next && $next ne '', "$name frees the slot for the waiting pull");
		ok($next_at - $freed_at < 0.3, "$name: within 0.3 s")
		  or diag sprintf('took %.3f s', $next_at - $freed_at);
		$held = $next;
		$held_tok = session_query($holder, "SELECT lease_token FROM hopper.jobs WHERE id = $held");
	}
	$_->{in} .= "\\q\n" for ($holder, $wl);
	$_->{run}->finish for ($holder, $wl);
}

# A limited queue's slots freed otherwise: by a claim rolled back (its transaction, a savepoint, or
# its session ended) and by a limit raised or removed. Each wakes the pull waiting for the slot
# (before, it found the job at its next look, up to a second later): three rounds each, each
# within 0.3 s. Every round has a queue of its own with two jobs of key k; the first is held (or
# claimed in the transaction that rolls back) and fills the key, the second waits for the slot.
{
	my @cases = (
		[ 'a rolled-back claim', 'queue_set_concurrency(:q, NULL, 1)', 'BEGIN', 'ROLLBACK' ],
		[ 'a claim rolled back to a savepoint', 'queue_set_concurrency(:q, NULL, 1)',
			'BEGIN; SAVEPOINT s', 'ROLLBACK TO SAVEPOINT s; COMMIT' ],
		[ 'a claim whose session ended', 'queue_set_concurrency(:q, NULL, 1)', 'BEGIN', undef ],
		[ 'a key limit raised', 'queue_set_concurrency(:q, NULL, 1)', '',
			"SELECT hopper.queue_set_concurrency(:q, NULL, 2)" ],
		[ 'a key limit removed', "queue_set_key_limit(:q, 'k', 1)", '',
			"SELECT hopper.queue_set_key_limit(:q, 'k', NULL)" ]);
	my $n = 0;
	for my $case (@cases)
	{
		my ($name, $limit, $begin, $end) = @$case;
		my @took;
		for my $round (1 .. 3)
		{
			my $q = "'pw_freed_" . ++$n . "'";
			my $holder = start_session($node, 'postgres');
			my $wl = start_session($node, 'postgres');
			(my $set = $limit) =~ s/:q/$q/g;
			session_query($holder,
				"SELECT hopper.queue_create($q); SELECT hopper.$set; "
				  . "SELECT count(*) FROM hopper.queue_push_batch($q, ARRAY['{}', '{}']::jsonb[], "
				  . "concurrency_keys => ARRAY['k', 'k'])");
			session_query($holder, $begin) if $begin ne '';
			session_query($holder, "SELECT id FROM hopper.queue_pull($q)");
			(my $pull_freed = $pull) =~ s/'pw'/$q/;
			session_send($wl, $pull_freed);
			ok(defined waiting(1), "$name, round $round: a pull waits while its key is full");
			my $at;
			if (defined $end)
			{
				(my $sql = $end) =~ s/:q/$q/g;
				session_query($holder, $sql);
				$at = session_query($holder, "SELECT extract(epoch FROM pg_catalog.clock_timestamp())");
			}
			else
			{
				my $pid = session_backend_pid($holder);
				$at = $node->safe_psql('postgres',
					"SELECT extract(epoch FROM pg_catalog.clock_timestamp()) "
					  . "FROM (SELECT pg_terminate_backend($pid)) t");
			}
			my ($got, $returned_at) = split /\|/, session_result($wl);
			ok(defined $got && $got ne '', "$name, round $round: the waiting pull gets a job");
			push @took, ($returned_at // 99) - $at;
			$holder->{in} .= "\\q\n";
			$wl->{in} .= "\\q\n";
			$_->{run}->finish for ($holder, $wl);
		}
		ok((grep { $_ < 0.3 } @took) == 3, "$name wakes the waiting pull: within 0.3 s each round")
		  or diag "took @took";
		note sprintf('%s: the pull returned %s s after', $name,
			join(', ', map { sprintf '%.3f', $_ } @took));
	}
}

# A transaction that holds a limited queue's lock to its end (a pull from a queue with a rate
# limit, a limit it set) does not sleep in a wait on another queue, pull or take: every pull of
# the locked queue would wait for the whole wait. Before, it slept the 4 s.
{
	my $a = start_session($node, 'postgres');
	session_query($a,
		"SELECT hopper.queue_create('pw_rated'); SELECT hopper.queue_set_rate_limit('pw_rated', 100, '1 s'); "
		  . "SELECT hopper.queue_push('pw_rated', '{}'); SELECT hopper.queue_create('pw_elsewhere'); "
		  . "SELECT hopper.queue_create('pw_limits_set')");
	my $elapsed = sub {
		my ($sql) = @_;
		return session_query($a,
			"SELECT count(*), extract(epoch FROM pg_catalog.clock_timestamp() - pg_catalog.statement_timestamp()) FROM $sql"
		);
	};
	for my $case (
		[ 'a pull from a queue with a rate limit', "SELECT count(*) FROM hopper.queue_pull('pw_rated', 1)" ],
		[ 'a limit set', "SELECT hopper.queue_set_concurrency('pw_limits_set', 5, NULL)" ])
	{
		my ($name, $lock) = @$case;
		session_query($a, "BEGIN; $lock");
		my ($n, $took) = split /\|/,
		  $elapsed->("hopper.queue_pull('pw_elsewhere', 1, wait => '4 s')");
		ok($took < 1, "after $name: a waiting pull on another queue returns at once")
		  or diag "took $took s";
		($n, $took) = split /\|/, $elapsed->("hopper.queue_take('pw_elsewhere', 1, wait => '4 s')");
		ok($took < 1, "after $name: so does a waiting take") or diag "took $took s";
		session_query($a, 'COMMIT');
	}
	$a->{in} .= "\\q\n";
	$a->{run}->finish;
}

$node->stop;
done_testing();
