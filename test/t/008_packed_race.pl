# Packed batches under concurrent claims: four clients pull (1, 7 or 100 at a time, completing
# what they get) and take (in transactions) from a packed backlog until it is gone. Every job must
# be handed out exactly once: no claim may reuse the front of a packed row that another claim moved
# and committed after the first one's snapshot was taken.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $jobs = 20_000;
my $node = PostgreSQL::Test::Cluster->new('packed');
$node->init;
$node->append_conf('postgresql.conf', "synchronous_commit = off\n");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION hopper');

# Rows of 100, and rows of 37 so that claims cross rows at odd places.
$node->safe_psql('app',
	"SET hopper.pack_batches = on;\n"
	  . join('',
		map { "SELECT count(*) FROM hopper.queue_push_batch('race', array_fill('{}'::jsonb, ARRAY[$_]));\n" }
		  ((1000) x 10, (37) x 270)));
my $pushed = $node->safe_psql('app',
	"SELECT sum(pg_catalog.cardinality(ids)) FROM hopper.job_batches WHERE queue = 'race'");
cmp_ok($pushed, '>=', $jobs / 2, "$pushed jobs waiting in packed rows");

my %scripts;
for my $n (1, 7, 100)
{
	$scripts{"hopper-pull-$n"} =
	  "SELECT count(*) FROM hopper.queue_pull('race', $n) j WHERE hopper.queue_complete(j.id, j.lease_token);\n";
}
$scripts{'hopper-take'} = "BEGIN;\nSELECT count(*) FROM hopper.queue_take('race', 10);\nCOMMIT;\n";
run_scripts($node, 'four clients pull and take packed jobs without an error', 4, 8, \%scripts, {});

# Whatever the clients left: drained by one session.
$node->safe_psql('app',
	"SELECT count(*) FROM hopper.queue_pull('race', 1000) j WHERE hopper.queue_complete(j.id, j.lease_token);\n"
	  x 30);
is($node->safe_psql('app', "SELECT count(*) FROM hopper.job_batches WHERE queue = 'race'"),
	'0', 'no packed row left');
is($node->safe_psql('app', "SELECT count(*) FROM hopper.jobs WHERE queue = 'race'"),
	'0', 'no job left');
is( $node->safe_psql('app',
		"SELECT count(*) || ' ' || count(DISTINCT id) FROM hopper.job_history WHERE queue = 'race'"),
	"$pushed $pushed",
	'every job finished exactly once');

$node->stop;
done_testing();
