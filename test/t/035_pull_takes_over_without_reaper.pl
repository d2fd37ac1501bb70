# With no reaper running in a database (stopped with reaper_stop(), hopper.reaper_enabled off, no
# free worker slot), pulls and takes take over the expired leases of their queue themselves, before
# they claim. Before, they did so only when they came back short of their n: while the queue had
# other jobs due, a crashed worker's job stayed running for good, and on a queue with concurrency
# limits its expired lease kept its key's slot, so the key's other jobs never ran. With a live
# reaper a pull that is not short leaves expired leases to the reaper, which puts them back after
# the queue's backoff.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('pull_takes_over');
$node->init;
# The live reaper of part 4 sleeps until told otherwise: the pull there must come before its pass.
$node->append_conf('postgresql.conf', "hopper.reaper_naptime = '1h'\n");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE nr');
$node->safe_psql('postgres', 'CREATE DATABASE live');
$node->safe_psql($_, 'CREATE EXTENSION hopper') for qw(nr live);

my $reaper_of = "SELECT count(*) = 1 FROM hopper.reaper_status() "
  . "WHERE database = pg_catalog.current_database()";
ok(defined wait_until($node, $_, $reaper_of), "the reaper of $_ runs") for qw(nr live);
is($node->safe_psql('nr', 'SELECT hopper.reaper_stop()'), 't', 'the reaper of nr is stopped');

# Pulls the first job of $queue as the worker "crashed", with a 1-second lease, and waits until
# the lease ended. Returns the job's id and lease token.
sub crashed_job
{
	my ($db, $queue) = @_;
	my ($id, $token) = split / /, $node->safe_psql($db,
		"SELECT id || ' ' || lease_token FROM hopper.queue_pull('$queue', worker => 'crashed', "
		  . "lease => '1 second')");
	ok(defined wait_until($node, $db,
			"SELECT lease_until < pg_catalog.clock_timestamp() FROM hopper.jobs WHERE id = $id"),
		"$queue: the lease of the crashed worker's job $id ended");
	return ($id, $token);
}

# What became of an expired job: its state, whether it still has a lease token, its last error.
sub put_back
{
	my ($db, $id) = @_;
	return $node->safe_psql($db,
		"SELECT state || ' ' || (lease_token IS NOT NULL) || ' ' || COALESCE(last_error, '-') "
		  . "FROM hopper.jobs WHERE id = $id");
}

my $pull_one = "SELECT j.id FROM hopper.queue_pull('%s', worker => 'healthy') j "
  . "WHERE hopper.queue_complete(j.id, j.lease_token)";

# 1. A plain queue with other jobs due: the next pull puts the crashed worker's job back, and it
# runs while the queue stays busy (a job pushed for each one done).
$node->safe_psql('nr', q{
	SELECT hopper.queue_create('bk');
	SELECT count(hopper.queue_push('bk', pg_catalog.jsonb_build_object('n', g)))
		FROM pg_catalog.generate_series(1, 20) g;
});
my ($id, $token) = crashed_job('nr', 'bk');
isnt($node->safe_psql('nr', sprintf($pull_one, 'bk')), $id, 'the next pull takes a due job');
is(put_back('nr', $id), 'available false lease expired (worker crashed)',
	'and puts the crashed worker\'s job back, though the queue was not short');
is($node->safe_psql('nr', "SELECT hopper.queue_complete($id, $token)"), 'f',
	'the crashed worker\'s token completes nothing');
my $ran_after;
for my $round (1 .. 30)
{
	$node->safe_psql('nr', q{SELECT hopper.queue_push('bk', '{"more": true}')});
	if ($node->safe_psql('nr', sprintf($pull_one, 'bk')) eq $id) { $ran_after = $round; last; }
}
ok(defined $ran_after, 'the job runs again while the queue stays busy');
is($node->safe_psql('nr', "SELECT state || ' ' || attempt || ' ' || worker "
		  . "FROM hopper.job_history WHERE id = $id"),
	'completed 2 healthy', 'as a second attempt, by the healthy worker');
cmp_ok($node->safe_psql('nr', q{SELECT count(*) FROM hopper.jobs WHERE queue = 'bk'}), '>', 0,
	'before the queue drained');

# 2. A queue with a limit of one running job per key: the expired lease gives its key's slot back
# at the next pull, and the key's other jobs run while the other keys keep the queue busy.
$node->safe_psql('nr', q{
	SELECT hopper.queue_create('bkl');
	SELECT hopper.queue_set_concurrency('bkl', NULL, 1);
	SELECT count(hopper.queue_push('bkl', pg_catalog.jsonb_build_object('n', g),
			concurrency_key => 'K'))
		FROM pg_catalog.generate_series(1, 5) g;
	SELECT count(hopper.queue_push('bkl', pg_catalog.jsonb_build_object('n', g),
			concurrency_key => 'other' || g))
		FROM pg_catalog.generate_series(6, 60) g;
});
($id, $token) = crashed_job('nr', 'bkl');
$node->safe_psql('nr', sprintf($pull_one, 'bkl')) for 1 .. 10;
is(put_back('nr', $id), 'available false lease expired (worker crashed)',
	'limited queue: the crashed worker\'s job was put back');
is($node->safe_psql('nr', q{SELECT count(*) FROM hopper.job_history
		WHERE queue = 'bkl' AND concurrency_key = 'K' AND state = 'completed'}),
	'4', 'its key\'s other jobs ran, one at a time');
is($node->safe_psql('nr', q{SELECT count(*) FROM hopper.jobs
		WHERE queue = 'bkl' AND state = 'available' AND concurrency_key <> 'K'}),
	'49', 'while the other keys had jobs waiting');
is($node->safe_psql('nr', "SELECT hopper.queue_complete($id, $token)"), 'f',
	'the crashed worker\'s token completes nothing');

# 3. queue_take does the same, in the taker's transaction.
$node->safe_psql('nr', q{
	SELECT hopper.queue_create('tk');
	SELECT count(hopper.queue_push('tk', pg_catalog.jsonb_build_object('n', g)))
		FROM pg_catalog.generate_series(1, 20) g;
});
($id, $token) = crashed_job('nr', 'tk');
my $take_one = "SELECT id FROM hopper.queue_take('tk', worker => 'taker')";
isnt($node->safe_psql('nr', $take_one), $id, 'the next take takes a due job');
is(put_back('nr', $id), 'available false lease expired (worker crashed)',
	'and puts the crashed worker\'s job back, though the queue was not short');
is($node->safe_psql('nr', "SELECT hopper.queue_complete($id, $token)"), 'f',
	'the crashed worker\'s token completes nothing');
$ran_after = undef;
for my $round (1 .. 30)
{
	$node->safe_psql('nr', q{SELECT hopper.queue_push('tk', '{"more": true}')});
	if ($node->safe_psql('nr', $take_one) eq $id) { $ran_after = $round; last; }
}
ok(defined $ran_after, 'the job is taken while the queue stays busy');
is($node->safe_psql('nr', "SELECT state || ' ' || attempt || ' ' || worker "
		  . "FROM hopper.job_history WHERE id = $id"),
	'completed 2 taker', 'as a second attempt');

# 4. With a live reaper, a pull that is not short leaves the expired lease to it, and the reaper
# puts the job back after the queue's backoff.
$node->safe_psql('live', q{
	SELECT hopper.queue_create('lv', backoff_base => '1 hour', backoff_cap => '2 hours',
		jitter => 0);
	SELECT count(hopper.queue_push('lv', pg_catalog.jsonb_build_object('n', g)))
		FROM pg_catalog.generate_series(1, 20) g;
});
($id, $token) = crashed_job('live', 'lv');
isnt($node->safe_psql('live', sprintf($pull_one, 'lv')), $id, 'live reaper: the pull takes a due job');
is(put_back('live', $id), 'running true -', 'and leaves the expired lease to the reaper');
$node->safe_psql('live',
	"ALTER SYSTEM SET hopper.reaper_naptime = '100ms'; SELECT pg_catalog.pg_reload_conf()");
ok(defined wait_until($node, 'live', "SELECT state = 'available' FROM hopper.jobs WHERE id = $id"),
	'the reaper rescues it');
is($node->safe_psql('live', "SELECT last_error || ' ' || (run_at > now() + interval '30 min') "
		  . "FROM hopper.jobs WHERE id = $id"),
	'lease expired (worker crashed) true', 'after the queue\'s backoff');
is($node->safe_psql('live', "SELECT hopper.queue_complete($id, $token)"), 'f',
	'the crashed worker\'s token completes nothing');

$node->stop;
done_testing();
