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

# Both tests below wait for the next minute's tick: leave them time to begin before it.
my $second = $node->safe_psql('postgres',
	'SELECT extract(epoch FROM clock_timestamp())::numeric % 60');
sleep(61 - $second) if $second > 50;

# A schedule changed to another queue while a run of it is in flight over a tick: the change
# waits for the run, and its next run must be reckoned after that wait. Reckoned before, it was
# the tick the run had just pushed, which then ran again for the new queue (the tick's dedup key
# is per queue), two jobs for one tick.
$node->safe_psql('postgres', q{SELECT hopper.queue_schedule('moved', '* * * * *', 'sq')});
my $tick = $node->safe_psql('postgres',
	q{SELECT extract(epoch FROM next_run_at)::bigint FROM hopper.schedules WHERE name = 'moved'});
my $run = start_session($node, 'postgres');
session_query($run,
	q{BEGIN; SELECT 1 FROM hopper.schedules WHERE name = 'moved' FOR UPDATE});
session_send($run, q{
	SELECT pg_sleep(60.3 - extract(epoch FROM clock_timestamp())::numeric % 60);
	SELECT hopper.schedule_run_due(clock_timestamp()) >= 1;
	COMMIT});

# A schedule declared in a transaction that began before a tick (a migration, say) runs from the
# real time: its first run is after the declaration, not the tick the transaction began before,
# which the reaper would have run at once. The transaction waits out the rest of its minute.
my $late = start_session($node, 'postgres');
session_send($late, q{
	BEGIN;
	SELECT hopper.queue_schedule('declared-late', '* * * * *', 'sq') > clock_timestamp()
	FROM pg_sleep(60.3 - extract(epoch FROM now())::numeric % 60);
	COMMIT});

my $change = start_session($node, 'postgres');
session_send($change, q{
	SELECT extract(epoch FROM hopper.queue_schedule('moved', '*/1 * * * *', 'sq2'))::bigint});
is(session_result($late), 't', 'a schedule declared in an older transaction first runs after its declaration');
like(session_result($run), qr/t$/, 'the run in flight pushes the tick');
my $next = session_result($change);
cmp_ok($next, '>', $tick, 'a schedule changed behind a run of its tick runs next at a later tick');
# Whatever is due now runs (the reaper may have been first).
$node->safe_psql('postgres', 'SELECT hopper.schedule_run_due()');
is($node->safe_psql('postgres',
		"SELECT string_agg(queue, ',') FROM hopper.jobs WHERE dedup_key = 'schedule:moved:$tick'"),
	'sq', 'the tick the run pushed has one job');

$node->stop;
done_testing();
