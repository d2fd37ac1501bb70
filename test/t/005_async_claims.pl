# Claim-only transactions commit without waiting for their WAL flush (hopper.async_claims). A crash
# may then lose claims, which only makes their jobs available again; it must never make a fencing
# token come round a second time, or a worker holding a lost claim could complete the job of the
# worker that claimed it after recovery.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('async_claims');
$node->init;
# A lazy WAL writer: an asynchronous commit's WAL stays in memory, so a crash loses it.
$node->append_conf('postgresql.conf', "wal_writer_delay = 10s\nwal_writer_flush_after = 0\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hopper');
$node->safe_psql('postgres',
	"SELECT count(*) FROM hopper.queue_push_batch('q', "
	  . "ARRAY(SELECT pg_catalog.jsonb_build_object('n', g) FROM pg_catalog.generate_series(1, 100) g))");
$node->safe_psql('postgres', 'CHECKPOINT');

# 40 claim-only transactions, one job each: more tokens than the sequence logs at once (32).
my $max_token = 0;
for my $i (1 .. 40) {
	my $token = $node->safe_psql('postgres',
		"SELECT lease_token FROM hopper.queue_pull('q', 1, lease => interval '1 hour')");
	$max_token = $token if $token > $max_token;
}
is($max_token, $node->safe_psql('postgres',
		"SELECT max(lease_token) FROM hopper.jobs WHERE state = 'running'"),
	'40 jobs claimed before the crash');

$node->stop('immediate');
$node->start;

my $after = $node->safe_psql('postgres',
	"SELECT lease_token FROM hopper.queue_pull('q', 1, lease => interval '1 hour')");
cmp_ok($after, '>', $max_token,
	"after crash recovery a claim gets a token never handed out before ($after > $max_token)");
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM hopper.jobs WHERE queue = 'q' "
		  . "AND state IN ('available', 'running')"),
	'100', 'no job lost: each claim either survived or left its job available again');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM hopper.jobs WHERE state = 'running' AND lease_token > $max_token"),
	'1', 'only the new claim holds a token above the old ones');

# The decision is visible at DEBUG1: made for a claim-only transaction, not with synchronous
# standbys (a failover could promote one that never got the token's WAL).
my $probe = "SET synchronous_commit = local; SET client_min_messages = debug1; "
  . "SELECT count(*) FROM hopper.queue_pull('q', 1, lease => interval '1 hour')";
my ($out, $err) = ('', '');
$node->psql('postgres', $probe, stdout => \$out, stderr => \$err);
like($err, qr/claim-only transaction commits without waiting/,
	'a claim-only transaction commits asynchronously');
$node->append_conf('postgresql.conf', "synchronous_standby_names = 'nobody'\n");
$node->reload;
($out, $err) = ('', '');
$node->psql('postgres', $probe, stdout => \$out, stderr => \$err);
is($out, '1', 'a claim with synchronous standbys configured');
unlike($err, qr/claim-only transaction commits without waiting/,
	'with synchronous standbys configured it stays synchronous');

$node->stop;
done_testing();
