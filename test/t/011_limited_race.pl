# Concurrency limits under concurrent pullers whose claims are in flight: a queue with a cap of 5
# running jobs and 1 per key, pulled by clients that hold each job a moment, clients that pull 3
# and roll back, and clients that pull inside a savepoint and roll it back, while urgent jobs are
# pushed ahead of the ones being claimed. Each holder counts its
# job in a table of counters (after its claim commits, and down again before its completion does),
# so a counter above a limit shows more jobs running at once than the limit allows.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = race_node('limited');
$node->safe_psql('app',
	"SELECT hopper.queue_create('lim', lease => '1 hour');\n"
	  . "SELECT hopper.queue_set_concurrency('lim', 5, 1);\n"
	  . "SELECT count(*) FROM hopper.queue_push_batch('lim',\n"
	  . "  array_fill('{}'::jsonb, ARRAY[40000]),\n"
	  . "  concurrency_keys => ARRAY(SELECT CASE WHEN g % 5 = 0 THEN NULL ELSE 'k' || g % 5 END\n"
	  . "                            FROM generate_series(1, 40000) g));\n"
	  . "CREATE TABLE counters (key text PRIMARY KEY, n int NOT NULL);\n"
	  . "INSERT INTO counters VALUES ('*', 0), ('-', 0), ('k1', 0), ('k2', 0), ('k3', 0), ('k4', 0);\n"
	  . "CREATE TABLE peaks (key text, n int);\n"
	  . "CREATE TABLE done (id bigint);\n"
	  . "GRANT ALL ON counters, peaks, done TO PUBLIC;");

# The counters of job :id: its key's (or '-') and the queue's ('*').
my $of_job = "FROM hopper.jobs j WHERE j.id = :id AND c.key IN (COALESCE(j.concurrency_key, '-'), '*')";
my %scripts = (
	'hold' => "SELECT COALESCE(max(id), 0) AS id, COALESCE(max(lease_token), 0) AS tok\n"
	  . "  FROM hopper.queue_pull('lim', 1) \\gset\n"
	  . "\\if :id > 0\n"
	  . "WITH c AS (UPDATE counters c SET n = c.n + 1 $of_job RETURNING c.key, c.n)\n"
	  . "  INSERT INTO peaks SELECT key, n FROM c;\n"
	  . "\\sleep 5 ms\n"
	  . "UPDATE counters c SET n = c.n - 1 $of_job;\n"
	  . "INSERT INTO done SELECT :id WHERE hopper.queue_complete(:id, :tok);\n"
	  . "\\else\n"
	  . "\\sleep 1 ms\n"
	  . "\\endif\n",
	# Jobs pushed ahead of those in flight, which a claim that did not count the claims in flight
	# would take beside them.
	'urgent' => "SELECT hopper.queue_push('lim', '{}', priority => -(random() * 10)::int,\n"
	  . "  concurrency_key => 'k' || (1 + (random() * 3)::int));\n",
	'rollback' => "BEGIN;\nSELECT count(*) FROM hopper.queue_pull('lim', 3);\n\\sleep 1 ms\nROLLBACK;\n",
	'savepoint' => "BEGIN;\nSAVEPOINT s;\nSELECT count(*) FROM hopper.queue_pull('lim', 2);\n"
	  . "ROLLBACK TO SAVEPOINT s;\n\\sleep 1 ms\nCOMMIT;\n");

run_scripts($node, 'eight clients push, pull, hold, complete and roll back claims without an error',
	8, 8, \%scripts, { hold => 6 });

my %peak = map { split /\|/ } split /\n/,
  $node->safe_psql('app', "SELECT key || '|' || max(n) FROM peaks GROUP BY key");
my $key_peak = (sort { $b <=> $a } map { $peak{$_} // 0 } qw(k1 k2 k3 k4))[0];
cmp_ok($key_peak, '<=', 1, "no key ever had more than 1 job running (peak $key_peak)");
cmp_ok($peak{'*'}, '<=', 5, "the queue never had more than 5 running (peak $peak{'*'})");
cmp_ok($peak{'*'}, '>=', 2, 'and the holders did run jobs side by side');
my $done = $node->safe_psql('app', 'SELECT count(*) FROM done');
cmp_ok($done, '>', 100, "the holders completed $done jobs");
is( $node->safe_psql('app', 'SELECT count(*) FROM done d JOIN hopper.job_history h USING (id)'),
	$done, 'each one recorded as finished');
# Nothing in flight is left behind: every job not finished is available again (the rolled-back
# claims included) or still leased by a holder the run's end cut short.
cmp_ok( $node->safe_psql('app', "SELECT count(*) FROM hopper.jobs WHERE queue = 'lim' AND state = 'running'"),
	'<=', 5, 'at most the cap of jobs still running at the end');
is( $node->safe_psql('app',
		"SELECT count(*) FROM hopper.queue_pull('lim', 5, at => now() + interval '2 hours')"),
	'5', 'and a pull once their leases expired gets a full cap of jobs');

$node->stop;
done_testing();
