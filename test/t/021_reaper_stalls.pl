# The reaper's batches (hopper.reaper_batch_size jobs or history rows each) must go on past rows
# they cannot handle: rows another session holds locked, and rows whose rescue or delete a trigger
# of the user's refuses. Such rows stay first in the batches' order: before, a batch full of them
# rescued or pruned nothing at every pass, and the rows after them waited for ever.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('reaper_stalls');
$node->init;
$node->append_conf('postgresql.conf',
	"hopper.reaper_batch_size = 2\nhopper.reaper_naptime = 200ms\nhopper.reaper_prune_interval = 1s\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hopper');
ok(defined reaper_runs($node, 'postgres'), 'the reaper runs');

sub count_of
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', "SELECT count(*) FROM hopper.jobs WHERE $sql");
}

# Pulls n jobs of $queue in a session of its own, session-bound; returns the session and the ids
# pulled, in order.
sub claim_bound
{
	my ($queue, $n) = @_;
	my $worker = start_session($node, 'postgres');
	my @ids = split /\n/, session_query($worker,
		"SELECT id FROM hopper.queue_pull('$queue', $n, lease => '1 hour', session_bound => true) ORDER BY id");
	return ($worker, @ids);
}

# Ends the session of claim_bound: its jobs are orphans.
sub end_session
{
	my ($worker, $queue) = @_;
	my $pid = session_backend_pid($worker);
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
	$worker->{run}->finish;
	ok(defined wait_until($node, 'postgres',
			"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid"),
		"$queue: the session-bound worker is gone");
}

# 1. Orphans behind orphans another session holds locked.
$node->safe_psql('postgres', q{
	SELECT hopper.queue_create('locked_orphans');
	SELECT hopper.queue_push('locked_orphans', pg_catalog.jsonb_build_object('n', i))
		FROM generate_series(1, 5) i;
});
my $holder = start_session($node, 'postgres');
my ($worker, @ids) = claim_bound('locked_orphans', 5);
is(scalar @ids, 5, 'five jobs claimed session-bound');
session_query($holder,
	"BEGIN; SELECT id FROM hopper.jobs WHERE id IN ($ids[0], $ids[1]) FOR UPDATE");
end_session($worker, 'locked_orphans');
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 3 FROM hopper.jobs WHERE queue = 'locked_orphans' AND state = 'available'", 20),
	'the orphans after a full batch of locked ones are rescued');
is(count_of("queue = 'locked_orphans' AND state = 'running'"), '2', 'the locked ones wait');
session_query($holder, 'COMMIT');
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 5 FROM hopper.jobs WHERE queue = 'locked_orphans' AND state = 'available'", 20),
	'and are rescued once let go');

# 2. A trigger that refuses the rescue of some jobs: "bad" ones, claimed first.
$node->safe_psql('postgres', q{
	CREATE FUNCTION public.refuse_rescue() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF OLD.payload ? 'bad' AND OLD.state = 'running' AND NEW.state = 'available' THEN
			RAISE EXCEPTION 'rescue of job % refused', OLD.id;
		END IF;
		RETURN NEW;
	END$$;
	CREATE TRIGGER refuse_rescue BEFORE UPDATE ON hopper.jobs
		FOR EACH ROW EXECUTE FUNCTION public.refuse_rescue();
	-- A dead job's history row, refused the same way.
	CREATE FUNCTION public.refuse_dead() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF NEW.payload ? 'bad' THEN RAISE EXCEPTION 'history of job % refused', NEW.id; END IF;
		RETURN NEW;
	END$$;
	CREATE TRIGGER refuse_dead BEFORE INSERT ON hopper.job_history
		FOR EACH ROW EXECUTE FUNCTION public.refuse_dead();
	SELECT hopper.queue_create('bad_orphans');
	SELECT hopper.queue_create('bad_leases');
	SELECT hopper.queue_push(q, '{"bad": 1}'), hopper.queue_push(q, '{"bad": 2}')
		FROM unnest(ARRAY['bad_orphans', 'bad_leases']) q;
	-- One good job on its last attempt goes dead.
	SELECT hopper.queue_push(q, '{"good": 1}'), hopper.queue_push(q, '{"good": 2}'),
		hopper.queue_push(q, '{"good": 3}', max_attempts => 1)
		FROM unnest(ARRAY['bad_orphans', 'bad_leases']) q;
});

# Session-bound: the bad jobs have the lowest ids, a whole batch of them.
my @orphans;
($worker, @orphans) = claim_bound('bad_orphans', 5);
end_session($worker, 'bad_orphans');
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 0 FROM hopper.jobs WHERE queue = 'bad_orphans' AND payload ? 'good' "
		  . "AND state = 'running'", 20),
	'gone sessions: the jobs after a full batch of refused rescues are rescued');
is(count_of("queue = 'bad_orphans' AND payload ? 'good' AND state = 'available'"), '2',
	'gone sessions: two come back');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM hopper.job_history WHERE queue = 'bad_orphans' AND state = 'dead'"),
	'1', 'gone sessions: the one on its last attempt is dead');
is(count_of("queue = 'bad_orphans' AND payload ? 'bad' AND state = 'running'"), '2',
	'gone sessions: the refused ones are left as they were');

# Expired leases: the bad jobs' leases end first.
$node->safe_psql('postgres', q{
	SELECT count(*) FROM hopper.queue_pull('bad_leases', 2, lease => '1 second');
	SELECT count(*) FROM hopper.queue_pull('bad_leases', 3, lease => '2 seconds');
});
is(count_of("queue = 'bad_leases' AND state = 'running'"), '5', 'five leases taken');
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 0 FROM hopper.jobs WHERE queue = 'bad_leases' AND payload ? 'good' "
		  . "AND state = 'running'", 20),
	'expired leases: the jobs after a full batch of refused rescues are rescued');
is(count_of("queue = 'bad_leases' AND payload ? 'good' AND state = 'available'"), '2',
	'expired leases: two come back');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM hopper.job_history WHERE queue = 'bad_leases' AND state = 'dead'"),
	'1', 'expired leases: the one on its last attempt is dead');
is(count_of("queue = 'bad_leases' AND payload ? 'bad' AND state = 'running'"), '2',
	'expired leases: the refused ones are left as they were');

my $log = slurp_file($node->logfile);
like($log, qr/rescue of job $orphans[0] \(queue "bad_orphans"\) failed: rescue of job $orphans[0] refused/,
	'a refused rescue of a gone session\'s job is reported, naming the job');
like($log, qr/rescue of job \d+ \(queue "bad_leases"\) failed: rescue of job \d+ refused/,
	'a refused rescue of an expired lease is reported, naming the job');

# Once the trigger lets them go, they are rescued at the next pass.
$node->safe_psql('postgres', 'DROP TRIGGER refuse_rescue ON hopper.jobs');
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 0 FROM hopper.jobs WHERE queue IN ('bad_orphans', 'bad_leases') "
		  . "AND state = 'running'", 20),
	'the refused jobs are rescued once they can be');
$node->safe_psql('postgres', 'DROP TRIGGER refuse_dead ON hopper.job_history');

# 3. History retention: a trigger that refuses the delete of some rows or skips it, and rows
# another session holds locked.
$node->safe_psql('postgres', q{
	CREATE FUNCTION public.refuse_prune() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF OLD.payload ? 'bad' THEN RAISE EXCEPTION 'prune of job % refused', OLD.id; END IF;
		IF OLD.payload ? 'keep' THEN RETURN NULL; END IF;
		RETURN OLD;
	END$$;
	CREATE TRIGGER refuse_prune BEFORE DELETE ON hopper.job_history
		FOR EACH ROW EXECUTE FUNCTION public.refuse_prune();
	SELECT hopper.queue_create(q) FROM unnest(ARRAY['bad_history', 'locked_history', 'kept_history']) q;
	SELECT hopper.queue_push('bad_history', '{"bad": 1}'), hopper.queue_push('bad_history', '{"bad": 2}');
	SELECT hopper.queue_push('kept_history', '{"keep": 1}'), hopper.queue_push('kept_history', '{"keep": 2}');
});
# The refused and locked rows finish first, so that they come first in any order.
my $finish = "SELECT count(*) FROM hopper.queue_pull('%s', 10) j "
  . "WHERE hopper.queue_complete(j.id, j.lease_token)";
$node->safe_psql('postgres', sprintf($finish, $_)) for ('bad_history', 'kept_history');
$node->safe_psql('postgres', q{
	SELECT hopper.queue_push('locked_history', pg_catalog.jsonb_build_object('n', i))
		FROM generate_series(1, 2) i;
});
$node->safe_psql('postgres', sprintf($finish, 'locked_history'));
$node->safe_psql('postgres', q{
	SELECT hopper.queue_push(q, pg_catalog.jsonb_build_object('good', i))
		FROM unnest(ARRAY['bad_history', 'locked_history', 'kept_history']) q, generate_series(1, 3) i;
});
$node->safe_psql('postgres', sprintf($finish, $_)) for ('bad_history', 'locked_history', 'kept_history');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM hopper.job_history WHERE queue IN ('bad_history', 'locked_history', 'kept_history')"),
	'15', 'fifteen jobs in history');
session_query($holder,
	"BEGIN; SELECT id FROM hopper.job_history WHERE queue = 'locked_history' "
	  . "AND NOT payload ? 'good' FOR UPDATE");
# Retention takes effect from now on.
$node->safe_psql('postgres',
	"SELECT hopper.queue_create(q, retention => '1 second') "
	  . "FROM unnest(ARRAY['bad_history', 'locked_history', 'kept_history']) q");
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 0 FROM hopper.job_history "
		  . "WHERE queue IN ('bad_history', 'locked_history', 'kept_history') AND payload ? 'good'", 20),
	'retention prunes the rows after a full batch of refused, skipped or locked ones');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM hopper.job_history WHERE queue = 'bad_history' AND payload ? 'bad'"),
	'2', 'the refused rows are kept');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM hopper.job_history WHERE queue = 'kept_history' AND payload ? 'keep'"),
	'2', 'the skipped rows are kept');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM hopper.job_history WHERE queue = 'locked_history'"),
	'2', 'the locked rows are kept');
# Read once every row is past its retention: a reaper that waited for the locked rows would stand
# still from then on.
my $last_run = $node->safe_psql('postgres', 'SELECT last_run FROM hopper.reaper_status()');
ok(defined wait_until($node, 'postgres',
		"SELECT last_run > '$last_run' FROM hopper.reaper_status()", 10),
	'the reaper does not wait for the locked rows: its passes go on');
like(slurp_file($node->logfile),
	qr/pruning job \d+ from the history of queue "bad_history" failed: prune of job \d+ refused/,
	'a refused prune is reported, naming the job');
session_query($holder, 'COMMIT');
$node->safe_psql('postgres', 'DROP TRIGGER refuse_prune ON hopper.job_history');
ok(defined wait_until($node, 'postgres',
		"SELECT count(*) = 0 FROM hopper.job_history WHERE queue IN ('bad_history', 'locked_history')", 20),
	'they are pruned once they can be');

$holder->{run}->finish;
$node->stop;
done_testing();
