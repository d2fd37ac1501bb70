# The reaper, a superuser, runs each schedule's push as the schedule's owner: row level security on
# hopper.jobs that keeps a producer out of a queue keeps its schedules out too. Before, a producer
# refused a push to a queue had the reaper push there for it, every minute.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('schedule_owner');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hopper'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hopper');
ok(defined reaper_runs($node, 'postgres'), 'the reaper runs');

$node->safe_psql('postgres', q{
	CREATE ROLE prod IN ROLE hopper_producer;
	SELECT hopper.queue_create('a'), hopper.queue_create('b');
	ALTER TABLE hopper.jobs ENABLE ROW LEVEL SECURITY;
	CREATE POLICY prod_a ON hopper.jobs TO prod USING (queue = 'a') WITH CHECK (queue = 'a');
});
my ($rc, $out, $err) = $node->psql('postgres',
	"SET ROLE prod; SELECT hopper.queue_push('b', '{}')");
like($err, qr/violates row-level security policy/, 'the producer may not push to b');

# The producer's schedules, due now rather than at the next minute.
$node->safe_psql('postgres', q{
	SET ROLE prod;
	SELECT hopper.queue_schedule('evil', '* * * * *', 'b', '{"evil": true}');
	SELECT hopper.queue_schedule('good', '* * * * *', 'a', '{"good": true}');
	UPDATE hopper.schedules SET next_run_at = now() - interval '1 minute';
});

ok(defined wait_until($node, 'postgres',
		"SELECT last_run_at IS NOT NULL FROM hopper.schedules WHERE name = 'good'", 20),
	'the reaper runs the schedule for the queue its owner may push to');
# Both are due at the same time, and a pass runs them in name order: "evil" has been run once
# "good" has.
like(slurp_file($node->logfile),
	qr/periodic job of schedule "evil" \(queue "b"\) failed: new row violates row-level security policy for table "jobs"/,
	'the schedule for the other queue is refused by the policy, as its owner\'s push is');
is($node->safe_psql('postgres', "SELECT count(*) FROM hopper.jobs WHERE queue = 'b'"),
	'0', 'the reaper pushed nothing to b');
is($node->safe_psql('postgres',
		"SELECT last_run_at IS NULL AND next_run_at <= now() FROM hopper.schedules WHERE name = 'evil'"),
	't', 'the refused schedule stays due');
is($node->safe_psql('postgres', "SELECT payload FROM hopper.jobs WHERE queue = 'a'"),
	'{"good": true}', 'the other schedule\'s job is pushed');

$node->stop;
done_testing();
