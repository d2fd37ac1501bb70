# The packed mark (hopper.queues.packed): a packed push sets it, the reaper clears it once the
# queue has no packed row left, and a clear never lands while a packed push that found the mark
# set is still open (its rows, invisible until it commits, would then be missed by every claim).
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('mark');
$node->init;
$node->append_conf('postgresql.conf', "hopper.reaper_naptime = 100ms\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hopper');
ok(defined reaper_runs($node, 'postgres'),
	'the reaper runs');

my $push = "SET hopper.pack_batches = on;\n"
  . "SELECT count(*) FROM hopper.queue_push_batch('pk', array_fill('{}'::jsonb, ARRAY[250]))";
my $mark = "SELECT packed FROM hopper.queues WHERE name = 'pk'";
my $drain = "SELECT count(*) FROM hopper.queue_take('pk', 1000)";

# Set by the push, kept while packed rows wait, cleared once they are gone.
$node->safe_psql('postgres', $push);
is($node->safe_psql('postgres', $mark), 't', 'a packed push marks its queue');
usleep(500_000);
is($node->safe_psql('postgres', $mark), 't', 'the mark stays while packed rows wait');
is($node->safe_psql('postgres', $drain), '250', 'the packed jobs are taken');
ok(defined wait_until($node, 'postgres', "SELECT NOT packed FROM hopper.queues WHERE name = 'pk'", 10),
	'the reaper clears the mark of a queue drained of packed rows');

# Marked again by the next packed push, whose jobs claims then find.
$node->safe_psql('postgres', $push);
is($node->safe_psql('postgres', $mark), 't', 'the next packed push marks the queue again');
is($node->safe_psql('postgres', $drain), '250', 'and its jobs are taken');

# The race: the mark set and no packed row committed, with the reaper parked so that it cannot
# clear the mark first. A push opens, finds the mark set (so writes nothing to hopper.queues) and
# leaves its rows uncommitted; then the reaper runs many passes.
$node->safe_psql('postgres', 'SELECT hopper.reaper_stop()');
$node->safe_psql('postgres', $push);
is($node->safe_psql('postgres', $drain), '250', 'drained with the reaper parked');
is($node->safe_psql('postgres', $mark), 't', 'the mark is still set');
my $s = start_session($node, 'postgres');
session_query($s, "BEGIN");
session_query($s, $push);
my $started = $node->safe_psql('postgres', 'SELECT now()');
$node->safe_psql('postgres', 'SELECT hopper.reaper_start()');
ok( defined wait_until(
		$node, 'postgres',
		"SELECT count(*) = 1 FROM hopper.reaper_status() "
		  . "WHERE last_run > '$started'::timestamptz + interval '1 s'", 10),
	'the reaper ran passes for more than a second while the push was open');
is($node->safe_psql('postgres', $mark), 't', 'the mark was not cleared under the open push');
session_query($s, "COMMIT");
usleep(500_000);
is($node->safe_psql('postgres', $mark), 't', 'nor after it committed its rows');
is($node->safe_psql('postgres', $drain), '250', 'every job of the open push is taken after it commits');
ok(defined wait_until($node, 'postgres', "SELECT NOT packed FROM hopper.queues WHERE name = 'pk'", 10),
	'then the mark is cleared');

# Under REPEATABLE READ a batch is stored a row per job: the transaction's snapshot may predate a
# clear, so such a push could not tell that the mark needs setting.
is( $node->safe_psql('postgres',
		"BEGIN ISOLATION LEVEL REPEATABLE READ;\n$push;\nCOMMIT;\n"
		  . "SELECT count(*) FROM hopper.jobs WHERE queue = 'pk';\n"
		  . "SELECT count(*) FROM hopper.job_batches WHERE queue = 'pk'"),
	"250\n250\n0",
	'a REPEATABLE READ push stores a row per job');

$node->stop;
done_testing();
