# What the direct writes leave on disk, checked by PostgreSQL's own verifier. Pushes, claims and
# completions go through the table and index access methods rather than the executor's statements,
# so a row an index lacks, a page written without WAL or a broken TOAST pointer would not show in
# any result the functions return. Every write path runs concurrently on a primary with a streaming
# standby; pg_amcheck (heap and TOAST pages, every B-tree index with every heap row looked up in
# it) then finds nothing on either, and the standby holds the same rows. Then again after every
# index is rebuilt concurrently under the load, after the primary is killed in the middle of the load and recovers from its WAL, and after the standby is
# promoted and drains what is left: every job pushed to the checked queues finished exactly once.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
# History pruning (retention) runs during the load too.
$primary->append_conf('postgresql.conf', "hopper.reaper_prune_interval = '1s'\n");
$primary->start;
$primary->safe_psql('postgres', 'CREATE DATABASE app');
$primary->safe_psql('app',
	"CREATE EXTENSION hopper;\n"
	  . "CREATE EXTENSION amcheck;\n"
	  . "SELECT hopper.queue_create('mix', max_attempts => 3, backoff_base => '10 ms', backoff_cap => '50 ms');\n"
	  . "SELECT hopper.queue_create('keyed');\n"
	  . "SELECT hopper.queue_set_concurrency('keyed', 20, 2);\n"
	  . "SELECT hopper.queue_set_key_limit('keyed', 'k0', 3);\n"
	  . "SELECT hopper.queue_set_rate_limit('keyed', 100000, '1 second');\n"
	  . "SELECT hopper.queue_create('dups', retention => '1 second');\n"
	  . "SELECT hopper.queue_create('forget', retention => '0');\n"
	  . "SELECT hopper.queue_schedule('tick', '* * * * *', 'ticks');\n"
	  # Indexes of an operator's own, which the direct writes must keep: an expression, a partial
	  # index on running jobs, and one on a history column.
	  . "CREATE INDEX app_tenant_idx ON hopper.jobs ((payload->>'tenant'));\n"
	  . "CREATE INDEX app_running_idx ON hopper.jobs (worker, id) WHERE state = 'running';\n"
	  . "CREATE INDEX app_history_kind_idx ON hopper.job_history (kind, id);\n"
	  # Every id a push returned, written in the push's transaction: it survives a crash exactly
	  # when the job does.
	  . "CREATE TABLE pushed (id bigint);\n"
	  . "GRANT ALL ON pushed TO PUBLIC;");

$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;

# Random text that does not compress: a payload of 6 kB goes to TOAST.
my $big = "(SELECT string_agg(md5(g::text || random()::text), '') FROM generate_series(1, 200) g)";
my %scripts = (
	'push' => "INSERT INTO pushed SELECT hopper.queue_push('mix', jsonb_build_object('tenant', :client_id),\n"
	  . "  priority => (random() * 3)::int, kind => 'k' || :client_id);\n",
	'push-big' => "INSERT INTO pushed SELECT hopper.queue_push('mix', jsonb_build_object('blob', $big));\n",
	'push-later' => "INSERT INTO pushed SELECT hopper.queue_push('mix', '{}', run_at => now() + interval '20 ms');\n",
	'push-batch' => "INSERT INTO pushed SELECT hopper.queue_push_batch('mix',\n"
	  . "  array_fill(jsonb_build_object('tenant', :client_id), ARRAY[10]));\n",
	'push-packed' => "BEGIN;\nSET LOCAL hopper.pack_batches = on;\n"
	  . "INSERT INTO pushed SELECT hopper.queue_push_batch('mix', array_fill('{\"p\": 1}'::jsonb, ARRAY[20]));\n"
	  . "COMMIT;\n",
	'push-keyed' => "INSERT INTO pushed SELECT hopper.queue_push('keyed', '{}',\n"
	  . "  concurrency_key => 'k' || (random() * 5)::int);\n",
	'push-dedup' => "SELECT hopper.queue_push('dups', '{}', dedup_key => 'd' || (random() * 50)::int);\n",
	'push-forget' => "SELECT count(*) FROM hopper.queue_push_batch('forget', array_fill('{}'::jsonb, ARRAY[10]));\n",
	'pull' => "SELECT count(*) FROM hopper.queue_pull('mix', 5, worker => 'w' || :client_id) j\n"
	  . "  WHERE hopper.queue_heartbeat(j.id, j.lease_token)\n"
	  . "    AND hopper.queue_progress(j.id, j.lease_token, 0.5, '{\"step\": 1}')\n"
	  . "    AND hopper.queue_complete(j.id, j.lease_token, '{\"ok\": true}');\n",
	# Holds one job between calls: completes the last and claims the next.
	'complete-pull' => "SELECT coalesce(max(id)::text, 'NULL') AS cid, coalesce(max(lease_token)::text, 'NULL') AS ctok\n"
	  . "  FROM hopper.queue_complete_pull(:cid, :ctok, NULL, 'mix', 1, lease => '1 hour') \\gset\n",
	'complete-many' => "WITH p AS (SELECT id, lease_token FROM hopper.queue_pull('mix', 7))\n"
	  . "SELECT count(*) FROM hopper.queue_complete_many(\n"
	  . "  coalesce((SELECT array_agg(id ORDER BY id) FROM p), '{}'),\n"
	  . "  coalesce((SELECT array_agg(lease_token ORDER BY id) FROM p), '{}'));\n",
	'fail' => "SELECT count(*) FROM hopper.queue_pull('mix', 2) j\n"
	  . "  WHERE hopper.queue_fail(j.id, j.lease_token, 'boom', retry_in => '0') IS NOT NULL;\n",
	'release' =>
	  "SELECT count(*) FROM hopper.queue_pull('mix', 1) j WHERE hopper.queue_release(j.id, j.lease_token);\n",
	# Leases left to expire: later pulls and the reaper rescue the jobs.
	'abandon' => "SELECT count(*) FROM hopper.queue_pull('mix', 1, lease => '10 ms');\n",
	'take' => "BEGIN;\nSELECT count(*) FROM hopper.queue_take('mix', 4);\nCOMMIT;\n",
	'take-fail' => "BEGIN;\nSELECT count(hopper.queue_fail_taken(id, 'bad input', permanent => true))\n"
	  . "  FROM hopper.queue_take('mix', 1);\nCOMMIT;\n",
	'cancel' => "SELECT count(hopper.queue_cancel(id)) FROM (SELECT id FROM hopper.jobs\n"
	  . "  WHERE queue = 'mix' ORDER BY id DESC LIMIT 1) c;\n",
	# Dead and cancelled jobs revived; another client may have revived the same one first.
	'retry' => "DO \$\$ BEGIN\n"
	  . "  PERFORM hopper.queue_retry(id) FROM hopper.job_history\n"
	  . "    WHERE queue = 'mix' AND state IN ('dead', 'cancelled') ORDER BY id DESC LIMIT 1;\n"
	  . "EXCEPTION WHEN object_not_in_prerequisite_state OR no_data_found THEN NULL;\n"
	  . "END \$\$;\n",
	'pull-keyed' =>
	  "SELECT count(*) FROM hopper.queue_pull('keyed', 3) j WHERE hopper.queue_complete(j.id, j.lease_token);\n",
	'take-dups' => "SELECT count(*) FROM hopper.queue_take('dups', 5);\n",
	'take-forget' => "SELECT count(*) FROM hopper.queue_take('forget', 8);\n",
	'ticks' => "SELECT hopper.schedule_run_due(now() + make_interval(mins => (random() * 100000)::int));\n");

my $dir = $primary->basedir . '/scripts';
mkdir $dir;
my @files;
for my $name (sort keys %scripts)
{
	open my $fh, '>', "$dir/$name.sql" or die $!;
	print $fh $scripts{$name};
	close $fh;
	push @files, '--file', "$dir/$name.sql\@" . ($name =~ /^push/ ? 1 : 2);
}

# pgbench on $node for $seconds with every script, 6 clients.
sub load
{
	my ($node, $seconds) = @_;
	return ('pgbench', '--no-vacuum', '--client=6', '--jobs=2', "--time=$seconds",
		'--define=cid=NULL', '--define=ctok=NULL', '--host', $node->host, '--port', $node->port,
		@files, 'app');
}

my @tables = qw(queues jobs job_history job_batches schedules queue_key_limits);
my $digest_sql = rows_digest(map { "hopper.$_" } @tables);

# The standby has replayed everything the primary wrote, and holds the same rows. Compared with
# nothing writing: the reaper stopped (it prunes history every second) and no backend of a killed
# client still finishing its statement.
sub same_rows
{
	my ($what) = @_;
	$primary->safe_psql('app', 'SELECT hopper.reaper_stop()');
	wait_until($primary, 'app',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE datname = 'app' AND pid <> pg_backend_pid() "
		  . "AND backend_type = 'client backend'")
	  or die 'clients still connected';
	$primary->wait_for_catchup($standby, 'replay', $primary->lsn('flush'));
	is($standby->safe_psql('app', $digest_sql),
		$primary->safe_psql('app', $digest_sql),
		"$what: the standby holds the primary's rows");
	$primary->safe_psql('app', 'SELECT hopper.reaper_start()');
}

# 1. Every write path at once.
my ($out, $err) = run_command([ load($primary, 8) ]);
is($? >> 8, 0, 'six clients push, claim, complete, fail, cancel, retry and take without an error')
  or diag($err);
like($out, qr/processed: [1-9]/, 'the load ran');
my $state = $primary->safe_psql('app',
	"SELECT (SELECT count(*) FROM hopper.job_history WHERE queue = 'mix' AND state = 'dead') || ' ' || "
	  . "(SELECT count(*) FROM hopper.job_history WHERE queue = 'mix' AND length(payload::text) > 6000)");
my ($dead, $toasted) = split / /, $state;
cmp_ok($dead, '>', 0, "$dead jobs went dead after their last attempt");
cmp_ok($toasted, '>', 0, "$toasted jobs with payloads in TOAST finished");
amcheck_ok($primary, 'after the load', 1);
same_rows('after the load');
amcheck_ok($standby, 'standby after the load');

# What a web API reads to show a job, a queue or the limits can be sent to the standby: the
# read-only functions answer there as on the primary (compared with nothing writing, and without
# the columns that depend on the clock).
$primary->safe_psql('app', 'SELECT hopper.reaper_stop()');
$primary->wait_for_catchup($standby, 'replay', $primary->lsn('flush'));
my $reads = join(";\n",
	"SELECT queue, available, scheduled, running, completed, dead, cancelled FROM hopper.queue_stats()",
	"SELECT * FROM hopper.queue_jobs('mix', NULL, 20)",
	"SELECT * FROM hopper.queue_jobs('mix', 'dead', 5)",
	"SELECT (hopper.job_status(id)).* FROM (SELECT min(id) AS id FROM hopper.job_history) h",
	"SELECT (hopper.job_status(id)).* FROM (SELECT max(id) AS id FROM hopper.jobs) j",
	"SELECT scope, concurrency_key, max_running, running, max_claims FROM hopper.queue_limits('keyed') ORDER BY 1, 2",
	"SELECT name, queue, next_run_at FROM hopper.queue_schedules()",
	"SELECT hopper.cron_next('*/5 * * * *', '2026-01-01')");
my ($rc, $on_standby, $standby_err) = $standby->psql('app', $reads);
is($rc . $standby_err, '0', 'the read-only functions run on the standby');
is($on_standby, $primary->safe_psql('app', $reads), 'and answer as on the primary');

# A producer or worker sent to the standby by mistake gets the read-only error, and the standby
# goes on.
for my $call ("SELECT hopper.queue_push('mix', '{}')", "SELECT * FROM hopper.queue_pull('mix', 1)",
	"SELECT * FROM hopper.queue_take('mix', 1)", "SELECT hopper.queue_create('elsewhere')")
{
	my ($rc, $out, $err) = $standby->psql('app', $call, extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	like($err, qr/ERROR:  25006: /, "on the standby: $call is refused as a write in a read-only transaction");
}
is($standby->safe_psql('app', 'SELECT count(*) > 0 FROM hopper.jobs'), 't', 'and the standby still answers');
$primary->safe_psql('app', 'SELECT hopper.reaper_start()');

# 1b. Indexes rebuilt and built concurrently under the load, as an operator fights bloat: the
# sessions that write directly keep descriptions of the indexes, and must give each new index its
# entries from the moment it is ready for inserts.
# A concurrent rebuild can lose a deadlock to a transaction that writes a table and then another
# (a take and its failure: history, then the hot table), as with any writer; it then leaves its
# unfinished index behind, invalid. The operator drops that and runs the rebuild again.
sub rebuild
{
	my ($sql) = @_;
	for my $try (1 .. 5)
	{
		my ($rc, $out, $err) = $primary->psql('app', $sql);
		return if $rc == 0;
		die "$sql: $err" unless $err =~ /deadlock detected/;
		$primary->safe_psql('app',
			"SELECT format('DROP INDEX CONCURRENTLY %s', indexrelid::regclass) FROM pg_index i "
			  . "JOIN pg_class c ON c.oid = i.indexrelid "
			  . "WHERE NOT indisvalid AND c.relnamespace = 'hopper'::regnamespace \\gexec");
	}
	die "$sql: deadlocked 5 times";
}
my $bench = IPC::Run::start([ load($primary, 60) ], '>', \$out, '2>', \$err);
sleep 1;
rebuild($_)
  for ('REINDEX TABLE CONCURRENTLY hopper.jobs',
	"CREATE INDEX CONCURRENTLY app_kind_idx ON hopper.jobs (kind, id) WHERE state = 'available'",
	'REINDEX TABLE CONCURRENTLY hopper.job_batches',
	'REINDEX TABLE CONCURRENTLY hopper.job_history',
	'REINDEX INDEX CONCURRENTLY hopper.app_kind_idx');
$bench->kill_kill;
$bench->finish;
amcheck_ok($primary, 'after the indexes were rebuilt under the load', 1);
same_rows('after the rebuilds');
amcheck_ok($standby, 'standby after the rebuilds');

# 2. The primary killed in the middle of the load: it recovers from its WAL, the standby follows.
$bench = IPC::Run::start([ load($primary, 60) ], '>', \$out, '2>', \$err);
sleep 4;
$primary->stop('immediate');
ok(!$bench->finish, 'the load was running when the primary was killed');
$primary->start;
amcheck_ok($primary, 'after a crash in the middle of the load', 1);
same_rows('after the crash');
amcheck_ok($standby, 'standby after the crash');

# 3. The standby promoted: it drains the rest as a primary would.
$primary->stop;
$standby->promote;
$standby->safe_psql('app', "SELECT hopper.queue_set_concurrency('keyed', NULL, NULL)");
is(drain_queues($standby, 'app', 'mix', 'keyed', 'dups'), '0', 'the promoted standby drained every job');
finished_once($standby, 'app', 'the checked queues', 'mix', 'keyed');
amcheck_ok($standby, 'promoted standby after the drain', 1);

$standby->stop;
done_testing();
