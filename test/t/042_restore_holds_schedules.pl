# A pg_restore that is not one transaction copies the tables' rows before it sets
# hopper.job_id_seq (after all table data, the application's too), and the restored database's
# reaper starts with CREATE EXTENSION. A periodic job pushed in between took an id the database
# already had: a history row, or an application's reference to a job, then named two jobs. The
# reaper now holds the periodic jobs while a pg_restore is connected to the database, or the
# sequence is behind the stored ids.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('restore_schedules');
$node->init;
$node->append_conf('postgresql.conf', "hopper.reaper_naptime = '200ms'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hopper');
ok(defined reaper_runs($node, 'postgres'), 'the reaper runs');

# The state a restore leaves between its COPYs and its SEQUENCE SET: jobs stored, the sequence
# fresh, a schedule due.
my $log_offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	SELECT hopper.queue_push('videos', pg_catalog.jsonb_build_object('n', g))
	FROM pg_catalog.generate_series(1, 3) g;
	SELECT hopper.queue_complete(id, lease_token) FROM hopper.queue_pull('videos', 2);
	SELECT pg_catalog.setval('hopper.job_id_seq', 1, false);
	SELECT hopper.queue_schedule('every-min', '* * * * *', 'cleanup', '{"s": 1}');
	UPDATE hopper.schedules SET next_run_at = now() - interval '5 seconds';
});
# A pass found the schedule due and held it.
ok($node->wait_for_log(qr/periodic jobs wait while a restore is under way/, $log_offset),
	'the wait is logged');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM hopper.jobs WHERE queue = 'cleanup'"),
	'0', 'no periodic job while the sequence is behind the stored ids');
is($node->safe_psql('postgres',
		"SELECT last_run_at IS NULL AND next_run_at <= now() FROM hopper.schedules"),
	't', 'the schedule stays due');

# The restore sets the sequence: the schedule runs with an id past the stored ones.
$node->safe_psql('postgres', "SELECT pg_catalog.setval('hopper.job_id_seq', 3)");
ok(defined wait_until($node, 'postgres',
		"SELECT true FROM hopper.jobs WHERE queue = 'cleanup'", 10),
	'the periodic job is pushed once the sequence is set');
is($node->safe_psql('postgres', "SELECT id FROM hopper.jobs WHERE queue = 'cleanup'"),
	'4', 'with the next id');
ok($node->wait_for_log(qr/periodic jobs run again/, $log_offset), 'the end of the wait is logged');

# The same through pg_dump and a pg_restore of one transaction per object, slowed by an
# application table restored after hopper's (its schema sorts later). The source's jobs are all
# finished: their history is not in the dump, so no stored id gives the restore away.
$node->safe_psql('postgres', q{
	CREATE DATABASE src;
	CREATE DATABASE dst;
});
$node->safe_psql('src', q{
	CREATE EXTENSION hopper;
	SELECT hopper.reaper_stop();
	SELECT hopper.queue_push('videos', pg_catalog.jsonb_build_object('n', g))
	FROM pg_catalog.generate_series(1, 3) g;
	SELECT hopper.queue_complete(id, lease_token) FROM hopper.queue_pull('videos', 3);
	SELECT hopper.queue_schedule('every-min', '* * * * *', 'cleanup', '{"s": 1}');
	UPDATE hopper.schedules SET next_run_at = now() - interval '5 seconds';
	CREATE TABLE public.app_data AS
		SELECT g AS id, pg_catalog.md5(g::text) AS v FROM pg_catalog.generate_series(1, 1000000) g;
});
my $dump = $node->basedir . '/src.dump';
$node->command_ok(['pg_dump', '-Fc', '-d', $node->connstr('src'), '-f', $dump], 'pg_dump');
{
	# pg_restore names itself in application_name, unless PGAPPNAME says otherwise (the test
	# framework sets it).
	delete local $ENV{PGAPPNAME};
	$node->command_ok(['pg_restore', '--exit-on-error', '-d', $node->connstr('dst'), $dump],
		'pg_restore');
}
ok(defined wait_until($node, 'dst', "SELECT true FROM hopper.jobs WHERE queue = 'cleanup'", 20),
	'the restored schedule runs');
is($node->safe_psql('dst', "SELECT id > 3 FROM hopper.jobs WHERE queue = 'cleanup'"),
	't', 'its job has an id the source never issued');

$node->stop;
done_testing();
