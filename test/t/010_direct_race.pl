# Claims and completions through the access methods under every kind of concurrent client at once:
# producers push while consumers pull 1 and complete, pull 7 and complete them in one call, take 10
# in a transaction, and hold leases of 5 ms past their end so that other pulls rescue the jobs and
# the late completions find their tokens gone. Every job must finish exactly once, and none may be
# left behind.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = race_node('direct');
$node->safe_psql('app',
	"CREATE TABLE pushed (id bigint);\n"
	  . "INSERT INTO pushed SELECT hopper.queue_push_batch('race', array_fill('{}'::jsonb, ARRAY[1000]))\n"
	  . "  FROM generate_series(1, 10);\n"
	  . "CREATE TABLE late (completed boolean);\n"
	  . "GRANT ALL ON pushed, late TO PUBLIC;");

my %scripts = (
	'push' => "INSERT INTO pushed SELECT hopper.queue_push('race', '{}');\n",
	'pull-1' =>
	  "SELECT count(*) FROM hopper.queue_pull('race', 1) j WHERE hopper.queue_complete(j.id, j.lease_token);\n",
	'take-10' => "BEGIN;\nSELECT count(*) FROM hopper.queue_take('race', 10);\nCOMMIT;\n",
	'late' => "SELECT COALESCE(max(id), 0) AS id, COALESCE(max(lease_token), 0) AS tok\n"
	  . "  FROM hopper.queue_pull('race', 1, lease => '5 milliseconds') \\gset\n"
	  . "\\sleep 20 ms\n"
	  . "INSERT INTO late SELECT hopper.queue_complete(:id, :tok) WHERE :id > 0;\n");
# Pulls 7 and completes them in one call.
$scripts{'pull-7-many'} =
    "WITH p AS (SELECT id, lease_token FROM hopper.queue_pull('race', 7))\n"
  . "SELECT count(*) FROM hopper.queue_complete_many(\n"
  . "  COALESCE((SELECT array_agg(id ORDER BY id) FROM p), '{}'),\n"
  . "  COALESCE((SELECT array_agg(lease_token ORDER BY id) FROM p), '{}'));\n";

run_scripts($node, 'six clients push, pull, complete, take and lose leases without an error', 6, 8,
	\%scripts, {});

my $late = $node->safe_psql('app',
	"SELECT count(*) FILTER (WHERE completed) || ' ' || count(*) FILTER (WHERE NOT completed) FROM late");
my ($late_done, $late_lost) = split / /, $late;
cmp_ok($late_lost, '>', 0,
	"late holders lost $late_lost leases to rescues (and completed $late_done in time)");

# Whatever the clients left: drained by one session an hour ahead (`at`), so that jobs the reaper
# rescued and put back after the retry backoff are due, and leases held at the end have expired (a
# pull short of its n rescues them).
drain_ahead($node, 'app', 'race', 1000, 20, '1 hour');
is($node->safe_psql('app', "SELECT count(*) FROM hopper.jobs WHERE queue = 'race'"),
	'0', 'no job left');
my $pushed = $node->safe_psql('app', "SELECT count(*) FROM pushed");
is( $node->safe_psql('app',
		"SELECT count(*) || ' ' || count(DISTINCT id) FROM hopper.job_history WHERE queue = 'race'"),
	"$pushed $pushed",
	"every one of the $pushed jobs finished exactly once");
is( $node->safe_psql('app',
		"SELECT count(*) FROM hopper.job_history h WHERE queue = 'race' AND NOT EXISTS "
		  . "(SELECT 1 FROM pushed p WHERE p.id = h.id)"),
	'0',
	'and only the jobs pushed');

$node->stop;
done_testing();
