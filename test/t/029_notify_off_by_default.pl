# hopper.notify = off set for a whole database (the reaper gets that default too): a session that
# sets it back on still has its pushes announced through the reaper's relay, and the reaper still
# announces what it makes available itself (a delayed job falling due). Sessions that keep the
# default announce nothing of their own pushes. (Before, the reaper obeyed the database's
# default and dropped them all.)
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('notify_off_by_default');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
# Set before the extension, so that the reaper it starts connects with it.
$node->safe_psql('postgres', 'ALTER DATABASE app SET hopper.notify = off');
$node->safe_psql('app', 'CREATE EXTENSION hopper');
ok(defined reaper_runs($node, 'app'), 'the reaper runs');
my ($reaper) = split /\|/, reaper_of($node, 'app');
is($node->safe_psql('app', 'SHOW hopper.notify'), 'off', 'the database turns hopper.notify off');

my $l = start_session($node, 'app');
session_query($l, 'LISTEN "hopper:nd"');
my $p = start_session($node, 'app');

# The default: no notification for the session's own push.
session_query($p, "SELECT hopper.queue_push('nd', '{}')");
ok(!scalar(wait_notification($l, 'hopper:nd', 1.5)),
	'a push of a session that keeps hopper.notify off is not announced');

# A session that turns it on: its push is relayed by the reaper.
session_query($p, 'SET hopper.notify = on');
session_query($p, "SELECT hopper.queue_push('nd', '{}')");
my ($took, $from) = wait_notification($l, 'hopper:nd', 5);
ok(defined $took, 'a push of a session that sets hopper.notify on is announced');
is($from, $reaper, 'by the reaper, which relays it');

# A job pushed for later, by a session with hopper.notify off: the reaper announces it when it
# falls due, as the reaper's own announcement.
session_query($p, 'RESET hopper.notify');
session_query($p, "SELECT hopper.queue_push('nd', '{}', run_at => now() + interval '1 s')");
my ($took_due, $from_due) = wait_notification($l, 'hopper:nd', 8);
ok(defined $took_due, 'a delayed job is announced by the reaper when it falls due');
is($from_due, $reaper, 'the announcement comes from the reaper');

$_->{in} .= "\\q\n" for ($l, $p);
$_->{run}->finish for ($l, $p);
$node->stop;
done_testing();
