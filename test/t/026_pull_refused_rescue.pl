# A pull that comes back short rescues the expired leases of its queue itself. When a trigger of
# the user's on hopper.jobs refuses the rescue of one expired job, the pull must not fail for it:
# before, every pull, take and waiting pull of that queue failed with the trigger's error until
# someone fixed the job, so one bad row stopped the whole queue. The refused job is left as it is
# (for the reaper, which reports it) and the pull claims the others. Errors that are not about the
# row (a cancel, a statement timeout, a serialization failure) still fail the pull.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('pull_refused_rescue');
$node->init;
$node->append_conf('postgresql.conf', "hopper.reaper_naptime = 200ms\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hopper');
ok(defined reaper_runs($node, 'postgres'), 'the reaper runs');
# The pulls must get to the expired leases before the reaper does.
is($node->safe_psql('postgres', 'SELECT hopper.reaper_stop()'), 't', 'the reaper is stopped');

$node->safe_psql('postgres', q{
	CREATE FUNCTION public.refuse_rescue() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF OLD.state = 'running' AND NEW.state = 'available' THEN
			IF OLD.payload ? 'bad' THEN
				RAISE EXCEPTION 'rescue of job % refused', OLD.id;
			ELSIF OLD.payload ? 'serial' THEN
				RAISE EXCEPTION 'rescue of job % not serializable', OLD.id
					USING ERRCODE = 'serialization_failure';
			ELSIF OLD.payload ? 'slow' AND current_setting('hopper_test.slow', true) = 'on' THEN
				PERFORM pg_catalog.pg_sleep(30);
			END IF;
		END IF;
		RETURN NEW;
	END$$;
	CREATE TRIGGER refuse_rescue BEFORE UPDATE ON hopper.jobs
		FOR EACH ROW EXECUTE FUNCTION public.refuse_rescue();
	-- What a pull ended with: 'ok' and the jobs' payloads, or its SQLSTATE and message.
	CREATE FUNCTION public.pull_outcome(q text, n integer) RETURNS text LANGUAGE plpgsql AS $$
	DECLARE got text;
	BEGIN
		SELECT pg_catalog.string_agg(payload::text, ' ' ORDER BY id) INTO got
			FROM hopper.queue_pull(q, n, lease => '1 hour');
		RETURN 'ok ' || COALESCE(got, '');
	EXCEPTION WHEN OTHERS THEN
		RETURN SQLSTATE || ' ' || SQLERRM;
	END$$;
});

# Pushes $payload to $queue, pulls it with a 1-second lease and waits until the lease ended.
# Returns the job's id.
sub expired_job
{
	my ($queue, $payload) = @_;
	my $id = $node->safe_psql('postgres', qq{
		SELECT hopper.queue_push('$queue', '$payload');
		SELECT id FROM hopper.queue_pull('$queue', 1, lease => '1 second');
	});
	$id = (split /\n/, $id)[-1];
	ok(defined wait_until($node, 'postgres',
			"SELECT lease_until < pg_catalog.clock_timestamp() FROM hopper.jobs WHERE id = $id"),
		"$queue: the lease of job $id ended");
	return $id;
}

sub state_of
{
	my ($id) = @_;
	return $node->safe_psql('postgres',
		"SELECT state || ' ' || (lease_token IS NOT NULL) FROM hopper.jobs WHERE id = $id");
}

# 1. queue_pull: the refused job is left, the others are pulled.
my $bad = expired_job('q', '{"bad": 1}');
$node->safe_psql('postgres',
	q{SELECT hopper.queue_push('q', '{"good": 1}'), hopper.queue_push('q', '{"good": 2}')});
is($node->safe_psql('postgres', "SELECT public.pull_outcome('q', 5)"),
	'ok {"good": 1} {"good": 2}', 'a pull short of its jobs returns the others, not the trigger\'s error');
is(state_of($bad), 'running true', 'the refused job is left as it was');
is($node->safe_psql('postgres', "SELECT public.pull_outcome('q', 5)"),
	'ok ', 'a pull that finds nothing but the refused job returns no rows');

# Other expired jobs of the queue are rescued past it, and taken by the pull that rescued them.
my $other = expired_job('q', '{"late": 1}');
is($node->safe_psql('postgres', "SELECT public.pull_outcome('q', 1)"), 'ok {"late": 1}',
	'a pull rescues and takes an expired job after the refused one');
is($node->safe_psql('postgres',
		"SELECT state || ' ' || attempt || ' ' || last_error FROM hopper.jobs WHERE id = $other"),
	'running 2 lease expired (worker unknown)', 'a new attempt, the lease\'s end in its errors');

# 2. queue_take, in a transaction of its own.
$node->safe_psql('postgres', q{SELECT hopper.queue_push('q', '{"good": 3}')});
my ($rc, $out, $err) = $node->psql('postgres',
	"SELECT payload FROM hopper.queue_take('q', 5)");
is($rc, 0, 'a take short of its jobs does not fail') or diag($err);
is($out, '{"good": 3}', 'it takes the other job');
is(state_of($bad), 'running true', 'the refused job is still left');

# 3. Waiting pulls: they do not fail, sleep until a push and take it. While they wait they do
# not retry the refused rescue in a busy loop (every retry uses up transaction ids), nor wake each
# other with the rollback of their refused rescues.
my @waiters = map { start_session($node, 'postgres') } 1 .. 2;
my $xid_before = $node->safe_psql('postgres',
	'SELECT pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())');
session_send($_,
	"SELECT payload FROM hopper.queue_pull('q', 1, lease => '1 hour', wait => '20 s')")
  for @waiters;
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 2 FROM pg_stat_activity WHERE query LIKE '%wait => ''20 s''%' "
		  . "AND wait_event_type = 'Extension' AND pid <> pg_backend_pid()"),
	'the pulls wait');
sleep 2;
my $xid_after = $node->safe_psql('postgres',
	'SELECT pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())');
cmp_ok($xid_after - $xid_before, '<', 50, 'the waiting pulls do not spin on the refused job');
$node->safe_psql('postgres',
	q{SELECT hopper.queue_push_batch('q', ARRAY['{"good": 4}', '{"good": 5}']::jsonb[])});
is(join(' ', sort map { session_result($_) } @waiters), '{"good": 4} {"good": 5}',
	'the waiting pulls take the jobs pushed while they wait');
$_->{run}->finish for @waiters;

# 4. Errors that are not about the job still fail the pull.
my $serial = expired_job('serial', '{"serial": 1}');
like($node->safe_psql('postgres', "SELECT public.pull_outcome('serial', 5)"),
	qr/^40001 rescue of job $serial not serializable/, 'a serialization failure fails the pull');
my $slow = expired_job('slow', '{"slow": 1}');
# (WHEN OTHERS does not catch a cancel: the pull is called directly.)
($rc, $out, $err) = $node->psql('postgres',
	"SET hopper_test.slow = on; SET statement_timeout = '500ms'; "
	  . "SELECT count(*) FROM hopper.queue_pull('slow', 5)");
like($err, qr/canceling statement due to statement timeout/, 'a statement timeout fails the pull');

# 5. The reaper reports the refused job at each pass and leaves it.
$node->safe_psql('postgres', 'SELECT hopper.reaper_start()');
ok(defined wait_until($node, 'postgres',
		"SELECT pg_catalog.pg_read_file('" . $node->logfile . "') ~ "
		  . "'rescue of job $bad \\(queue \"q\"\\) failed: rescue of job $bad refused'"),
	'the reaper reports the refused job');
is(state_of($bad), 'running true', 'and leaves it');
is($node->safe_psql('postgres', 'SELECT hopper.reaper_stop()'), 't', 'the reaper is stopped again');

# 6. Once the trigger lets it through, the next pull rescues the job and takes it.
$node->safe_psql('postgres', 'DROP TRIGGER refuse_rescue ON hopper.jobs');
is($node->safe_psql('postgres', "SELECT public.pull_outcome('q', 5)"), 'ok {"bad": 1}',
	'a pull once the trigger is gone rescues the job and takes it');
is($node->safe_psql('postgres', "SELECT state || ' ' || attempt FROM hopper.jobs WHERE id = $bad"),
	'running 2', 'as its second attempt');

$node->stop;
done_testing();
