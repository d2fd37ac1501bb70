# A push's relayed wake-up is counted in its queue's claim-hint slot, and the reaper reads the count
# between the steps of its pass. A slot idle for 10 s passes to another queue that needs one
# (the server keeps 256); it used to pass with a count the reaper had not read yet, and the
# "hopper:<queue>" notification was lost when a step of the pass took longer than that. A slot
# whose count is not relayed yet now stays with its queue (for a few minutes at most, in case no
# reaper ever reads it): here a trigger of the user's holds the reaper in the rescue of one job
# while the queue's slot is idle, every other slot is in use, and a new queue asks for one.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('wakeup_slot');
$node->init;
$node->append_conf('postgresql.conf', "hopper.reaper_naptime = 200ms\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hopper');
ok(defined reaper_runs($node, 'postgres'), 'the reaper runs');

# The reaper's rescue of a job of queue "stall" waits in this trigger until public.go has a row.
$node->safe_psql('postgres', q{
	CREATE TABLE public.go (at timestamptz);
	CREATE FUNCTION public.hold_rescue() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		-- A minute at most, so that a failing test does not hang.
		FOR i IN 1 .. 1200 LOOP
			EXIT WHEN EXISTS (SELECT 1 FROM public.go);
			PERFORM pg_sleep(0.05);
		END LOOP;
		RETURN NEW;
	END$$;
	CREATE TRIGGER hold_rescue BEFORE UPDATE ON hopper.jobs FOR EACH ROW
		WHEN (OLD.queue = 'stall' AND OLD.state = 'running' AND NEW.state <> 'running')
		EXECUTE FUNCTION public.hold_rescue();
	SELECT hopper.queue_create('stall');
	SELECT hopper.queue_create('woken');
	SELECT hopper.queue_push('stall', '{}');
	SELECT count(*) FROM hopper.queue_pull('stall', 1, lease => '1 second');
});
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'hopper reaper' "
		  . "AND wait_event = 'PgSleep'", 20),
	'the reaper is held in the rescue');

my $l = start_session($node, 'postgres');
session_query($l, 'LISTEN "hopper:woken"');
my $p = start_session($node, 'postgres');
session_query($p, 'SET hopper.notify = on');
session_query($p, "SELECT hopper.queue_push('woken', '{}')");
my $pushed = time;
ok(!scalar(wait_notification($l, 'hopper:woken', 1)),
	'the push is left to the reaper to announce (not heard while it is held)');

# Every other slot in use, and used after the push: 254 new queues, and "stall" looked at again (a
# second after its pull, so that its slot counts as used now).
session_query($p, 'SET hopper.notify = off');
session_query($p,
	"SELECT count(hopper.queue_push('filler_' || i, '{}')) FROM generate_series(1, 254) i");
session_query($p, "SELECT count(*) FROM hopper.queue_pull('stall')");
is($node->safe_psql('postgres', 'SELECT count(*) FROM hopper.claim_positions()'),
	'256', 'every slot is in use');

# Once the pushed queue's slot has been idle for 10 s it is the one idle longest: a new queue
# asks for a slot.
usleep(int((10.5 - (time - $pushed)) * 1_000_000)) if time - $pushed < 10.5;
session_query($p, "SELECT hopper.queue_push('late', '{}')");
my %held = map { $_ => 1 } split /\n/,
  $node->safe_psql('postgres', 'SELECT queue FROM hopper.claim_positions()');
ok($held{woken}, 'the slot with a wake-up not yet relayed stays with its queue');

# The reaper goes on, and relays the wake-up.
$node->safe_psql('postgres', 'INSERT INTO public.go VALUES (now())');
my ($took) = wait_notification($l, 'hopper:woken', 10);
ok(defined $took, 'the wake-up counted before the slot idled is relayed');

# Relayed, the slot may pass on: the next new queue takes it (the reaper marks it relayed just
# after its NOTIFY commits, so the push may have to ask again).
ok(defined wait_until($node, 'postgres',
		"DO \$\$ BEGIN PERFORM hopper.queue_push('later', '{}'); END \$\$;\n"
		  . "SELECT bool_or(queue = 'later') AND NOT bool_or(queue = 'woken') "
		  . "FROM hopper.claim_positions()", 10),
	'once relayed, the idle slot passes to a queue that needs one');

$_->{in} .= "\\q\n" for $l, $p;
$_->{run}->finish for $l, $p;
$node->stop;
done_testing();
