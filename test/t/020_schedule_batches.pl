# The reaper runs due schedules hopper.reaper_batch_size at a time. A schedule whose push fails
# stays due and keeps its place first in order: a full batch of such schedules ended every pass
# before, and the schedules after them never ran. Each pass now goes on past them.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('schedule_batches');
$node->init;
$node->append_conf('postgresql.conf', "hopper.reaper_batch_size = 2\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hopper');
ok(defined reaper_runs($node, 'postgres'), 'the reaper runs');

# Two schedules whose jobs a trigger refuses sort before the good one: a whole batch of failures.
$node->safe_psql('postgres', q{
	CREATE FUNCTION public.refuse_bad() RETURNS trigger LANGUAGE plpgsql AS
		$$BEGIN IF NEW.payload ? 'bad' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END$$;
	CREATE TRIGGER refuse_bad BEFORE INSERT ON hopper.jobs
		FOR EACH ROW EXECUTE FUNCTION public.refuse_bad();
	SELECT hopper.queue_create('sq');
	SELECT hopper.queue_schedule('a-bad1', '* * * * *', 'sq', '{"bad": 1}');
	SELECT hopper.queue_schedule('a-bad2', '* * * * *', 'sq', '{"bad": 2}');
	SELECT hopper.queue_schedule('z-good', '* * * * *', 'sq', '{"good": 1}');
	-- Due now rather than at the next minute.
	UPDATE hopper.schedules SET next_run_at = now() - interval '1 minute';
});

ok(defined wait_until($node, 'postgres',
		"SELECT last_run_at IS NOT NULL FROM hopper.schedules WHERE name = 'z-good'", 20),
	'the schedule after a full batch of failing ones runs');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM hopper.jobs WHERE queue = 'sq' AND payload ? 'good'"),
	'1', 'its job is pushed');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM hopper.schedules WHERE name LIKE 'a-bad%' AND last_run_at IS NULL "
		  . "AND next_run_at <= now()"),
	'2', 'the failing schedules stay due');
like(slurp_file($node->logfile),
	qr/periodic job of schedule "a-bad2" \(queue "sq"\) failed/,
	'their failures are reported');

# Once their pushes go through, they run at the next pass.
$node->safe_psql('postgres', 'DROP TRIGGER refuse_bad ON hopper.jobs');
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 0 FROM hopper.schedules WHERE last_run_at IS NULL", 20),
	'the failing schedules run once they can');

# A schedule declared in a transaction that began before a tick (a migration, say) runs from the
# real time: its first run is after the declaration, not the tick the transaction began before,
# which the reaper would have run at once. The transaction waits out the rest of its minute.
is($node->safe_psql('postgres', q{
	BEGIN;
	SELECT hopper.queue_schedule('declared-late', '* * * * *', 'sq') > clock_timestamp()
	FROM pg_sleep(60.3 - extract(epoch FROM now())::numeric % 60);
	COMMIT;
}), 't', 'a schedule declared in an older transaction first runs after its declaration');

$node->stop;
done_testing();
