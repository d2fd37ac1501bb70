# A waiting pull with a kinds filter passes on every wake-up it cannot use, not only the first:
# a pull for kind x that pushes of kind y keep waking hands each of them to the pull for y
# waiting behind it. (Before, it passed on one wake-up and then dropped every other until one of
# its own sleeps ran out, which pushes coming less than a second apart never let happen: each
# later pull for y found its job only at its once-a-second recheck, about 1 s after the push.)
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('kinds_pass_on');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hopper');
$node->safe_psql('postgres', "SELECT hopper.queue_create('kp')");

# Until $n pulls of queue kp are asleep in their wait.
sub asleep
{
	my ($n) = @_;
	return wait_until($node, 'postgres',
		"SELECT count(*) = $n FROM pg_stat_activity WHERE wait_event_type = 'Extension' "
		  . "AND query LIKE '%queue_pull(''kp''%' AND backend_type = 'client backend'");
}

my $pusher = start_session($node, 'postgres');
sub push_kind
{
	my ($kind) = @_;
	return session_query($pusher,
		"SELECT extract(epoch FROM pg_catalog.clock_timestamp()) "
		  . "FROM hopper.queue_push('kp', '{}', kind => '$kind')");
}

# The pull for kind x waits first, so each push's wake-up reaches it first.
my $wx = start_session($node, 'postgres');
session_send($wx,
	"SELECT count(*) FROM hopper.queue_pull('kp', 1, kinds => ARRAY['x'], wait => '60 s')");
ok(defined asleep(1), 'a pull for kind x waits');

# One pull for kind y after another, each waiting behind the pull for x, each getting the job
# of kind y pushed while it waits. The rounds follow each other within a second, so the pull
# for x never sleeps a whole second between two pushes.
my @took;
for my $round (1 .. 5)
{
	my $wy = start_session($node, 'postgres');
	session_send($wy,
		"SELECT id, extract(epoch FROM pg_catalog.clock_timestamp()) "
		  . "FROM hopper.queue_pull('kp', 1, kinds => ARRAY['y'], wait => '10 s')");
	ok(defined asleep(2), "round $round: a pull for kind y waits behind it");
	my $pushed_at = push_kind('y');
	my ($id, $returned_at) = split /\|/, session_result($wy);
	ok(defined $id && $id ne '', "round $round: the pull for kind y gets the job of kind y");
	push @took, ($returned_at // 99) - $pushed_at;
	$wy->{in} .= "\\q\n";
	$wy->{run}->finish;
	ok(defined asleep(1), "round $round: the pull for kind x waits on");
}
note sprintf('pulls for kind y returned %s s after their push',
	join(', ', map { sprintf '%.3f', $_ } @took));
# Woken: within 0.5 s of the push (typically milliseconds); not woken, a pull returns at its
# recheck, a second after it began to sleep.
ok((grep { $_ < 0.5 } @took) == 5, 'every pull for kind y returned within 0.5 s of its push');

# The pull for x gets its own job and ends.
push_kind('x');
is(session_result($wx), '1', 'the pull for kind x gets the job of kind x');

$_->{in} .= "\\q\n" for ($pusher, $wx);
$_->{run}->finish for ($pusher, $wx);
$node->stop;
done_testing();
