# Batches with dedup keys pushed at once by several clients, the same new keys in a different
# order in each batch, beside single pushes of those keys. A batch takes its keys in key order,
# so no two of them wait for each other (in payload order they deadlocked within seconds), and
# every key ends with one unfinished job.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('keyed');
$node->init;
$node->append_conf('postgresql.conf', "synchronous_commit = off\n");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION hopper');

# Keys change 20 times a second, so the clients keep meeting on new keys.
my $keys = "(SELECT (extract(epoch FROM clock_timestamp()) * 20)::bigint::text)";
my %scripts = (
	'batch' => "SELECT count(*) FROM hopper.queue_push_batch('keyed', "
	  . "ARRAY(SELECT '{}'::jsonb FROM generate_series(1, 10)), dedup_keys => "
	  . "(SELECT ARRAY(SELECT t || '-' || g FROM generate_series(1, 10) g ORDER BY random()) "
	  . "FROM $keys AS x(t)));\n",
	'single' => "SELECT hopper.queue_push('keyed', '{}', dedup_key => "
	  . "(SELECT t || '-' || (1 + (random() * 9)::int) FROM $keys AS x(t)));\n");
run_scripts($node, 'keyed batches in different orders push without a deadlock', 4, 6,
	\%scripts, { 'batch' => 4, 'single' => 1 });

is( $node->safe_psql('app',
		"SELECT count(*) = count(DISTINCT dedup_key) AND count(*) > 0 FROM hopper.jobs WHERE queue = 'keyed'"),
	't',
	'one job per key');
$node->stop;
done_testing();
