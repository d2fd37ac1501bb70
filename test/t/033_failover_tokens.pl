# A fencing token is never handed out twice, not even across an asynchronous failover. A standby
# that stopped receiving WAL is promoted after the primary handed out tokens it never saw: the
# promoted standby's sequence continues from the last value it replayed, and without more it would
# give the same jobs the same tokens again, so that a worker that claimed a job on the old primary
# and reconnects to the new one could heartbeat and complete the job of the worker that claimed it
# there. Every way a claim is made is tried: straight through the access methods, by the claim
# statement (a kinds filter), on a limited queue and from packed rows; and by a session connected
# to the standby before its promotion as well as by new ones, the first of them by a role that
# holds hopper_worker only.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->start;
$primary->safe_psql('postgres', 'CREATE DATABASE app');
$primary->safe_psql('app',
	"CREATE EXTENSION hopper;\n"
	  . "CREATE ROLE app_worker LOGIN IN ROLE hopper_worker;\n"
	  . "SELECT hopper.queue_create('limited');\n"
	  . "SELECT hopper.queue_set_concurrency('limited', 10, NULL);\n"
	  . "SELECT hopper.queue_push('plain', '{\"n\": 1}');\n"
	  . "SELECT hopper.queue_push('kinds', '{\"n\": 2}', kind => 'k');\n"
	  . "SELECT hopper.queue_push('limited', '{\"n\": 3}');\n"
	  . "SET hopper.pack_batches = on;\n"
	  . "SELECT hopper.queue_push_batch('packed', ARRAY['{\"n\": 4}'::jsonb, '{\"n\": 5}']);\n"
	  # Tokens handed out before the standby stops receiving: it replays them.
	  . "SELECT count(hopper.queue_complete(id, lease_token)) FROM hopper.queue_pull('plain', 1);\n"
	  . "SELECT hopper.queue_push('plain', '{\"n\": 6}');\n");

$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));

# A session connected to the standby while it is one: it claims only after the promotion.
my $early = start_session($standby, 'app');
is(session_query($early, 'SELECT pg_is_in_recovery()'), 't', 'a session on the standby');

# The standby stops receiving WAL.
$standby->safe_psql('app', "ALTER SYSTEM SET primary_conninfo = ''; SELECT pg_reload_conf();");
ok( defined wait_until($standby, 'app', 'SELECT count(*) = 0 FROM pg_stat_wal_receiver')
	  && defined wait_until($primary, 'app', 'SELECT count(*) = 0 FROM pg_stat_replication'),
	'the standby no longer receives WAL');

# Past the 32 values a sequence logs ahead: without the floor, the new primary would hand out
# the very tokens the old one gives the old worker below.
$primary->safe_psql('app',
	"SELECT count(pg_catalog.nextval('hopper.lease_token_seq')) FROM pg_catalog.generate_series(1, 100)");

# The old worker claims one job of each queue on the primary; none of it reaches the standby.
my %pull = (
	plain => "hopper.queue_pull('plain', 1, lease => '1 hour', worker => 'old-worker')",
	kinds => "hopper.queue_pull('kinds', 1, lease => '1 hour', worker => 'old-worker', kinds => ARRAY['k'])",
	limited => "hopper.queue_pull('limited', 1, lease => '1 hour', worker => 'old-worker')",
	packed => "hopper.queue_pull('packed', 1, lease => '1 hour', worker => 'old-worker')");
my %old;
for my $q (sort keys %pull)
{
	my ($id, $token) = split /\|/, $primary->safe_psql('app', "SELECT id, lease_token FROM $pull{$q}");
	ok($id && $token, "$q: the old worker claimed job $id with token $token on the old primary");
	$old{$q} = [ $id, $token ];
}
my $old_max = $primary->safe_psql('app', 'SELECT max(lease_token) FROM hopper.jobs');

$standby->promote;
is($standby->safe_psql('app', 'SELECT pg_is_in_recovery()'), 'f', 'the standby is promoted');

# The new primary never saw those claims: the jobs are available there, and a new worker claims
# each of them. Its token must be one the old worker does not hold.
for my $q (sort keys %pull)
{
	my ($id, $old_token) = @{ $old{$q} };
	(my $sql = "SELECT id, lease_token FROM $pull{$q}") =~ s/old-worker/new-worker/;
	# The first claim there is a worker's, which may draw tokens but not set their sequence.
	my $got =
	    $q eq 'plain' ? session_query($early, $sql)
	  : $q eq 'kinds' ? $standby->safe_psql('app', $sql, extra_params => [ '-U', 'app_worker' ])
	  :                 $standby->safe_psql('app', $sql);
	my ($new_id, $new_token) = split /\|/, $got;
	is($new_id, $id, "$q: the new worker claims job $id on the new primary");
	isnt($new_token, $old_token, "$q: with a token other than the old worker's ($new_token)");
	cmp_ok($new_token, '>', $old_max, "$q: above every token the old primary handed out");

	# The old worker reconnects to the new primary: it has lost the job.
	is( $standby->safe_psql('app',
			"SELECT hopper.queue_heartbeat($id, $old_token)::text || ' ' || "
			  . "hopper.queue_progress($id, $old_token, 0.5)::text || ' ' || "
			  . "coalesce(hopper.queue_fail($id, $old_token, 'old-worker gave up')::text, 'null') || ' ' || "
			  . "hopper.queue_complete($id, $old_token, '{\"by\": \"old-worker\"}')::text"),
		'false false null false',
		"$q: the old worker's heartbeat, progress and complete answer false, its fail NULL");
	is( $standby->safe_psql('app',
			"SELECT hopper.queue_complete($id, $new_token, '{\"by\": \"new-worker\"}')"),
		't', "$q: the new worker completes it");
	is( $standby->safe_psql('app', "SELECT state || ' ' || (result->>'by') FROM hopper.job_status($id)"),
		'completed new-worker', "$q: the job's result is the new worker's");
}

# A crash of the new primary keeps it: the tokens go on above the old primary's.
$standby->stop('immediate');
$standby->start;
my $after = $standby->safe_psql('app',
	"SELECT lease_token FROM hopper.queue_pull('packed', 1, lease => '1 hour')");
cmp_ok($after, '>', $old_max, 'after a crash of the new primary its tokens stay above the old ones');

$early->{run}->kill_kill;
$standby->stop;
$primary->stop;
done_testing();
