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

# The owner is a role, not a role's name. Without the policy, for roles of their own.
$node->safe_psql('postgres', q{
	DROP POLICY prod_a ON hopper.jobs;
	ALTER TABLE hopper.jobs DISABLE ROW LEVEL SECURITY;
	CREATE ROLE alice IN ROLE hopper_producer;
	CREATE ROLE carol IN ROLE hopper_producer;
	SET ROLE alice;
	SELECT hopper.queue_schedule('renamed', '0 0 1 1 *', 'a', '{"renamed": true}');
	SET ROLE carol;
	SELECT hopper.queue_schedule('dropped', '0 0 1 1 *', 'a', '{"dropped": true}');
});

# A renamed role keeps its schedules: they run as it. Before, the schedule named a role that was
# gone, and the reaper reported it, on every pass, and left it due.
$node->safe_psql('postgres', q{
	ALTER ROLE alice RENAME TO bob;
	UPDATE hopper.schedules SET next_run_at = now() - interval '1 minute' WHERE name = 'renamed';
});
ok(defined wait_until($node, 'postgres',
		"SELECT last_run_at IS NOT NULL FROM hopper.schedules WHERE name = 'renamed'", 20),
	'the reaper runs the schedule of a renamed role');
is($node->safe_psql('postgres',
		"SELECT owner FROM hopper.queue_schedules() WHERE name = 'renamed'"),
	'bob', 'the schedules list the renamed role as its owner');
is($node->safe_psql('postgres', q{SELECT count(*) FROM hopper.jobs WHERE payload ? 'renamed'}),
	'1', 'the renamed role\'s schedule pushed its job');

# A role dropped and made again under its name is another role: it does not inherit the
# schedules of the one dropped, nor their rights. Before, the new carol's rights pushed them.
my $carol = $node->safe_psql('postgres', "SELECT oid FROM pg_roles WHERE rolname = 'carol'");
$node->safe_psql('postgres', q{
	DROP ROLE carol;
	CREATE ROLE carol IN ROLE hopper_producer;
	UPDATE hopper.schedules SET next_run_at = now() - interval '1 minute' WHERE name = 'dropped';
});
ok(defined wait_until($node, 'postgres',
		"SELECT owner IS NULL OR last_run_at IS NOT NULL FROM hopper.schedules WHERE name = 'dropped'",
		20),
	'the reaper comes to the schedule of the dropped role');
is($node->safe_psql('postgres', q{SELECT count(*) FROM hopper.jobs WHERE payload ? 'dropped'}),
	'0', 'the schedule of the dropped role pushes nothing as the new role of its name');
is($node->safe_psql('postgres',
		"SELECT coalesce(owner, '<none>') || ' ' || (last_run_at IS NULL) FROM hopper.queue_schedules() "
		  . "WHERE name = 'dropped'"),
	'<none> true', 'the schedule of the dropped role has no owner, and has not run');
# Reported once, then left alone: not a WARNING every pass.
my $seen = $node->safe_psql('postgres', 'SELECT last_run FROM hopper.reaper_status()');
ok(defined wait_until($node, 'postgres',
		"SELECT last_run > '$seen'::timestamptz + interval '3 seconds' FROM hopper.reaper_status()"),
	'the reaper makes more passes');
my @reported = slurp_file($node->logfile)
  =~ /schedule "dropped" \(queue "a"\) no longer runs: its owner was dropped\n[^\n]*DETAIL:  Its owner was the role with OID $carol\./g;
is(scalar @reported, 1, 'the reaper reports the schedule of the dropped role once');
# A superuser gives it to a role, as README says; it runs as that role.
$node->safe_psql('postgres',
	"UPDATE hopper.schedules SET owner = 'carol' WHERE owner IS NULL AND name = 'dropped'");
ok(defined wait_until($node, 'postgres',
		"SELECT last_run_at IS NOT NULL FROM hopper.schedules WHERE name = 'dropped'", 20),
	'given to a role, the schedule runs again');

# pg_dump writes the owner's name, and a restore into another server maps it to that server's
# role of that name, whatever its OID there.
my $copy = PostgreSQL::Test::Cluster->new('schedule_owner_copy');
$copy->init;
$copy->start;
$copy->safe_psql('postgres', q{
	CREATE ROLE filler1; CREATE ROLE filler2; CREATE ROLE carol; CREATE ROLE bob; CREATE ROLE prod;
});
my $dump = $node->basedir . '/schedules.dump';
$node->command_ok(['pg_dump', '-d', $node->connstr('postgres'), '-Fc', '-f', $dump], 'pg_dump');
$copy->command_ok(['pg_restore', '-d', $copy->connstr('postgres'), '--exit-on-error', $dump],
	'pg_restore into another server');
my $owners = q{SELECT string_agg(s.name || ':' || s.owner::text, ',' ORDER BY s.name)
	FROM hopper.schedules s JOIN pg_roles r ON r.oid = s.owner WHERE s.name IN ('dropped', 'renamed')};
is($copy->safe_psql('postgres', $owners), 'dropped:carol,renamed:bob',
	'the restored schedules belong to the roles of their owners\' names');
isnt($copy->safe_psql('postgres', "SELECT oid FROM pg_roles WHERE rolname = 'bob'"),
	$node->safe_psql('postgres', "SELECT oid FROM pg_roles WHERE rolname = 'bob'"),
	'whose OIDs differ from the dumped server\'s');
$copy->stop;

$node->stop;
done_testing();
