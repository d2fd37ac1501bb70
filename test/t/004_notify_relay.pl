# Push wake-ups relayed by the reaper: a LISTENing session hears "hopper:<queue>" from the reaper
# promptly after a push commits (the push's own commit takes no NOTIFY lock), never for a push that
# rolled back, also for a push that committed after a later one or whose transaction was long, and
# from the pushing backend itself when no reaper runs or when hopper.notify_relay is off. A job
# pushed for later is announced when it falls due, not at its push. "hopper:done" only for queues
# that turned it on.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('relay');
$node->init;
$node->append_conf('postgresql.conf', "max_prepared_transactions = 2\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hopper');
ok(defined reaper_runs($node, 'postgres'),
	'the reaper runs');
my ($reaper) = split /\|/, reaper_of($node, 'postgres');

my $l = start_session($node, 'postgres');
session_query($l, 'LISTEN "hopper:relay"');
session_query($l, 'LISTEN "hopper:other"');
session_query($l, 'LISTEN "hopper:done"');
my $p = start_session($node, 'postgres');
my $producer = session_backend_pid($p);

# Relayed: heard from the reaper, within a second (typically milliseconds).
my @times;
for my $i (1 .. 5)
{
	session_query($p, "SELECT hopper.queue_push('relay', '{}')");
	my ($took, $from) = wait_notification($l, 'hopper:relay', 5);
	is($from, $reaper, "push $i: the reaper sent the wake-up");
	ok(defined $took && $took < 1, "push $i: heard within 1 s");
	push @times, $took // 99;
}
note sprintf('relayed wake-up heard %s s after the push returned',
	join(', ', map { sprintf '%.3f', $_ } @times));

# A push that rolled back wakes nobody.
session_query($p, "BEGIN; SELECT hopper.queue_push('relay', '{}'); ROLLBACK");
ok(!scalar(wait_notification($l, 'hopper:relay', 1.5)), 'a rolled-back push is not announced');

# Several pushes in one transaction, to two queues: one wake-up per queue.
session_query($p,
	"BEGIN; SELECT hopper.queue_push('relay', '{}'); SELECT count(*) FROM hopper.queue_push_batch('relay', ARRAY['{}', '{}']::jsonb[]); SELECT hopper.queue_push('other', '{}'); COMMIT");
my ($t_other, $from_other) = wait_notification($l, 'hopper:other', 5);
is($from_other, $reaper, 'a transaction pushing to two queues: the second queue is announced');
my $heard = session_query($l, 'SELECT 1');
my $relay_count = () = $heard =~ /"hopper:relay"/g;
ok($relay_count <= 1, 'the first queue is announced once');

# Commit order differs from id order: the job with the lower id commits last and is still
# announced (its commit counts the wake-up). The higher job is pulled before, so that only the
# lower one can be the reason for the second wake-up.
{
	session_query($l, 'LISTEN "hopper:order"');
	# (Created first: a push that creates a queue holds its row until it commits.)
	$node->safe_psql('postgres', "SELECT hopper.queue_create('order')");
	my $early = start_session($node, 'postgres');
	session_query($early, "BEGIN");
	my $low = session_query($early, "SELECT hopper.queue_push('order', '{\"low\": true}')");
	my $high = session_query($p, "SELECT hopper.queue_push('order', '{\"high\": true}')");
	ok($high > $low, 'the later push has the higher id');
	my (undef, $from) = wait_notification($l, 'hopper:order', 5);
	is($from, $reaper, 'the higher id, committed first, is announced');
	is(session_query($p, "SELECT id FROM hopper.queue_pull('order')"), $high, 'and pulled');
	session_query($l, 'SELECT 1');
	session_query($early, "COMMIT");
	my ($took, $from_low) = wait_notification($l, 'hopper:order', 5);
	is($from_low, $reaper, 'the lower id, committed last, is announced too');
	note sprintf('out-of-order commit announced after %.3f s', $took // -1);
	$early->{in} .= "\\q\n";
	$early->{run}->finish;
}

# A push whose transaction stays open for seconds is relayed like any other.
session_query($p, "BEGIN; SELECT hopper.queue_push('relay', '{}'); SELECT pg_sleep(1.2); COMMIT");
my (undef, $from_long) = wait_notification($l, 'hopper:relay', 5);
is($from_long, $reaper, 'a long push transaction is relayed too');

# A job pushed for later wakes nobody at its push (a worker would find nothing to do), relayed or
# direct; the reaper announces it when it falls due. A transaction that stays open past its job's
# run_at announces it at its commit.
{
	session_query($l, 'LISTEN "hopper:later"');
	for my $relay ('on', 'off')
	{
		session_query($p,
			"SET hopper.notify_relay = $relay; SELECT hopper.queue_push('later', '{}', run_at => now() + interval '3 seconds')"
		);
		my $t0 = time;
		ok(!scalar(wait_notification($l, 'hopper:later', 1.5)),
			"notify_relay $relay: a job due in 3 s is not announced at its push");
		my ($took, $from) = wait_notification($l, 'hopper:later', 6);
		is($from, $reaper, "notify_relay $relay: the reaper announces it when it falls due");
		ok(time - $t0 >= 2.5, "notify_relay $relay: not before");
		session_query($p, "SELECT hopper.queue_pull('later')");
	}
	session_query($p,
		"BEGIN; SELECT hopper.queue_push('later', '{}', run_at => clock_timestamp() + interval '0.2 seconds'); SELECT pg_sleep(0.5); COMMIT"
	);
	my (undef, $from) = wait_notification($l, 'hopper:later', 0.9);
	is($from, $producer, 'due by its commit: announced at once (relay off: by the pushing session)');
	session_query($p, "RESET hopper.notify_relay");
}

# hopper.notify_relay = off: direct.
session_query($p, "SET hopper.notify_relay = off; SELECT hopper.queue_push('relay', '{}')");
my (undef, $from_direct) = wait_notification($l, 'hopper:relay', 5);
is($from_direct, $producer, 'notify_relay off: the push sends its NOTIFY itself');
session_query($p, "RESET hopper.notify_relay");

# hopper.notify = off: nothing.
session_query($p, "SET hopper.notify = off; SELECT hopper.queue_push('relay', '{}')");
ok(!scalar(wait_notification($l, 'hopper:relay', 1.5)), 'notify off: no wake-up');
session_query($p, "RESET hopper.notify");

# "hopper:done" only for a queue that turned it on.
{
	my $done_for = sub {
		my ($queue) = @_;
		session_query($p,
			"SELECT hopper.queue_complete(id, lease_token) FROM hopper.queue_pull('$queue', 10)");
		my $out = session_query($l, 'SELECT pg_sleep(0.2)');
		return scalar(() = $out =~ /"hopper:done" with payload "\{"id": \d+, "queue": "\Q$queue\E"/g);
	};
	session_query($p, "SELECT hopper.queue_push('other', '{}')");
	session_query($l, 'SELECT pg_sleep(0.2)');
	is($done_for->('other'), 0, 'no hopper:done for a queue that did not ask for it');
	session_query($p, "SELECT hopper.queue_set_notify_done('relay', true)");
	ok($done_for->('relay') >= 1, 'hopper:done for the queue that asked for it');
}

# Paced steps (hopper.notify_relay_interval): a push after a quiet spell is announced at once; the
# pushes that follow within the interval are announced together by the step that ends it, so a
# burst of pushes costs a few relay steps rather than one each, and none goes unannounced.
{
	$node->safe_psql('postgres',
		"LOAD 'hopper'; ALTER SYSTEM SET hopper.notify_relay_interval = '700ms'; SELECT pg_reload_conf()");
	session_query($l, 'LISTEN "hopper:burst"');
	session_query($p, "SELECT hopper.queue_create('burst')");
	usleep(1_000_000);    # the reload has reached the reaper, and no step is recent
	session_query($l, 'SELECT 1');
	session_query($p, "SELECT hopper.queue_push('burst', '{}')");
	my ($took, $from) = wait_notification($l, 'hopper:burst', 5);
	is($from, $reaper, 'paced relay: the first push is announced by the reaper');
	ok(defined $took && $took < 0.5, 'paced relay: the first push is announced at once');
	session_query($p, join('', map { "SELECT hopper.queue_push('burst', '{}');\n" } 1 .. 20));
	my $heard = session_query($l, 'SELECT pg_sleep(2)');
	my $steps = () = $heard =~ /"hopper:burst"/g;
	ok($steps >= 1 && $steps <= 3,
		"paced relay: 20 pushes in separate transactions announced in $steps steps (1 to 3)");
	is(session_query($p, "SELECT count(*) FROM hopper.queue_pull('burst', 100)"), 21,
		'paced relay: every pushed job is there to pull');
	$node->safe_psql('postgres',
		"LOAD 'hopper'; ALTER SYSTEM RESET hopper.notify_relay_interval; SELECT pg_reload_conf()");
}

# A wake-up whose latch the reaper consumed while it waited for a lock in its pass (a lock wait
# resets the latch as it sleeps) is still relayed once the pass ends: the counts are read after
# every nap, not only when the latch was set.
{
	session_query($l, 'LISTEN "hopper:blocked"');
	my $holder = start_session($node, 'postgres');
	session_query($holder, 'BEGIN; LOCK TABLE hopper.schedules IN ACCESS EXCLUSIVE MODE');
	ok( defined wait_until($node, 'postgres',
			"SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $reaper", 10),
		'lock held: the reaper waits for it in its pass');
	session_query($l, 'SELECT 1');
	session_query($p, "SELECT hopper.queue_push('blocked', '{}')");
	usleep(300_000);
	session_query($holder, 'COMMIT');
	my ($took, $from) = wait_notification($l, 'hopper:blocked', 5);
	is($from, $reaper, 'latch consumed by a lock wait: the reaper still relays the push');
	ok(defined $took && $took < 3, 'within the next nap once the lock is released');
	$holder->{run}->finish;
}

# No reaper (stopped): the push notifies by itself, and the producer learns it at once (the
# reaper it knew has exited), not at its next periodic look.
is($node->safe_psql('postgres', 'SELECT hopper.reaper_stop()'), 't', 'reaper stopped');
session_query($l, 'SELECT 1');
session_query($p, "SELECT hopper.queue_push('relay', '{}')");
my ($t_fb, $from_fb) = wait_notification($l, 'hopper:relay', 5);
is($from_fb, $producer, 'reaper stopped: the push sends its NOTIFY itself');
ok(defined $t_fb && $t_fb < 1, 'and it arrives at once');

# Started again: relayed again once the producer's periodic look (every 5 s) has found it.
is($node->safe_psql('postgres', 'SELECT hopper.reaper_start()'), 't', 'reaper started again');
ok(defined reaper_runs($node, 'postgres'),
	'the new reaper runs');
($reaper) = split /\|/, reaper_of($node, 'postgres');
my $from_again = '';
my $t0 = time;
while (time - $t0 < 15 && $from_again ne $reaper)
{
	session_query($p, "SELECT hopper.queue_push('relay', '{}')");
	(undef, $from_again) = wait_notification($l, 'hopper:relay', 5);
	$from_again //= '';
	usleep(200_000);
}
is($from_again, $reaper, 'the new reaper relays again');
note sprintf('relay resumed %.1f s after reaper_start()', time - $t0);

# A release is announced at its commit, as a push is. And a transaction
# that released a job can be prepared (a NOTIFY in the transaction made PREPARE fail with 0A000);
# like a prepared push, its release wakes nobody when COMMIT PREPARED makes the job available.
session_query($p,
	"SET hopper.notify = off; SELECT hopper.queue_push('relay', '{}'); RESET hopper.notify");
# Whatever the pushes above still have on their way is heard first.
1 while (my @late = wait_notification($l, 'hopper:relay', 0.5));
session_query($p,
	"SELECT hopper.queue_release(id, lease_token) FROM hopper.queue_pull('relay', 1)");
{
	my ($took) = wait_notification($l, 'hopper:relay', 5);
	ok(defined $took && $took < 1, 'a release is announced at its commit');
}
# An operator's release from a connection of its own (no push or pull there to have found the
# reaper) is relayed too, not sent as that connection's own NOTIFY.
{
	session_query($p,
		"SET hopper.notify = off; SELECT hopper.queue_push('relay', '{}'); RESET hopper.notify");
	1 while (my @late = wait_notification($l, 'hopper:relay', 0.5));
	my $held = session_query($p,
		"SELECT id || ', ' || lease_token FROM hopper.queue_pull('relay', 1)");
	$node->safe_psql('postgres', "SELECT hopper.queue_release($held)");
	my (undef, $from) = wait_notification($l, 'hopper:relay', 5);
	is($from, $reaper, 'a release from a fresh connection is relayed by the reaper');
}
$node->safe_psql('postgres', q{
	SET hopper.notify = off;
	SELECT hopper.queue_push('prepared', '{}');
	RESET hopper.notify;
	BEGIN;
	SELECT hopper.queue_release(id, lease_token) FROM hopper.queue_pull('prepared', 1);
	PREPARE TRANSACTION 'hopper_release';
	COMMIT PREPARED 'hopper_release';});
is($node->safe_psql('postgres', "SELECT state FROM hopper.jobs WHERE queue = 'prepared'"),
	'available', 'a release in a prepared transaction is committed');

# The server counts relayed wake-ups in 256 slots lent to queues. A queue that finds none free (here
# 300 queues pushed to at once take them all) notifies by itself; its wake-up is never lost. Last in
# this file: the slots stay taken for 10 s.
{
	session_query($l, 'LISTEN "hopper:slot_300"');
	session_query($p,
		"SELECT count(hopper.queue_push('slot_' || i, '{}')) FROM generate_series(1, 299) i");
	session_query($p, "SELECT hopper.queue_push('slot_300', '{}')");
	my (undef, $from_full) = wait_notification($l, 'hopper:slot_300', 5);
	is($from_full, $producer, 'no slot free: the push sends its NOTIFY itself');
}

for my $s ($l, $p)
{
	$s->{in} .= "\\q\n";
	$s->{run}->finish;
}
$node->stop;
done_testing();
