# The server keeps claim positions for 256 queues at a time. Once every slot is taken, a new queue
# gets none while all are in use, and takes the one idle longest once it has been idle for 10 s:
# queues and databases that come and go do not use the slots up for the life of the server. A
# position lent anew starts at the front and follows pushes like any other. A name that is no
# queue gets none: a worker pulling from many such names must not push the queues out.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('claim_slots');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hopper');
my $sql = sub { $node->safe_psql('postgres', "SET hopper.notify = off; $_[0]") };

# A worker pulls from 300 names that are no queue (a typo, a loop over names), one of them
# waiting: none takes a slot, so the 256 are still there for the queues below. q0 is not a queue
# yet either.
my $nowhere = "pg_catalog.generate_series(1, 300) g, LATERAL hopper.queue_pull('nosuch' || g, 1)";
is($sql->("SELECT count(*) FROM $nowhere"), '0', 'nothing pulled from 300 names that are no queue');
is($sql->("SELECT count(*) FROM hopper.queue_pull('q0', 1, wait => '0.2 s')"),
	'0', 'nor from q0, waiting');
is($sql->('SELECT count(*) FROM hopper.claim_positions()'), '0', 'and none of them took a slot');

# 256 queues, each pushed to and pulled from: every slot taken.
$sql->("SELECT count(*) FROM pg_catalog.generate_series(0, 255) g,
        LATERAL hopper.queue_push('q' || g, '{}')");
is( $sql->("SELECT count(*) FROM pg_catalog.generate_series(0, 255) g,
            LATERAL hopper.queue_pull('q' || g, 1)"),
	'256', 'one job pulled from each of 256 queues');
is($sql->('SELECT count(*) FROM hopper.claim_positions()'), '256', 'each holds a slot');
is($sql->('SELECT count(*) FROM hopper.claim_positions() WHERE resumes'),
	'256', 'and a position past its claimed job');

# All slots were used just now: a new queue works without one.
$sql->("SELECT hopper.queue_push('late', '{\"n\": 1}')");
is($sql->("SELECT payload->>'n' FROM hopper.queue_pull('late', 1)"), '1', 'a 257th queue pulls');
is($sql->("SELECT count(*) FROM hopper.claim_positions() WHERE queue = 'late'"),
	'0', 'but gets no slot while all are in use');

# Ten seconds later they are idle. Pulls from names that are no queue still take none of them.
sleep 11;
is($sql->("SELECT count(*) FROM $nowhere"), '0', 'the 300 names pulled from again');
is($sql->("SELECT count(*) FROM hopper.claim_positions() WHERE queue ~ '^q[0-9]+\$'"),
	'256', 'every queue keeps its idle slot');

# The next use of a queue takes the one idle longest.
$sql->("SELECT hopper.queue_push('late', '{\"n\": 2}'), hopper.queue_push('late', '{\"n\": 3}')");
is($sql->("SELECT payload->>'n' FROM hopper.queue_pull('late', 1)"), '2', 'pulls in order');
is($sql->("SELECT resumes FROM hopper.claim_positions() WHERE queue = 'late'"),
	't', 'the queue now holds a slot with a position');
is($sql->('SELECT count(*) FROM hopper.claim_positions()'), '256', 'taken from another queue');

# A job pushed below the position lowers it: the next claim finds it, not the job after the
# position.
$sql->("SELECT hopper.queue_push('late', '{\"n\": 4}', priority => -5)");
is($sql->("SELECT payload->>'n' FROM hopper.queue_pull('late', 1)"),
	'4', 'a more urgent push is claimed first');
is($sql->("SELECT payload->>'n' FROM hopper.queue_pull('late', 1)"), '3', 'then the rest');

# The queue that gave its slot up still works, and takes another idle slot when it comes back.
my $gone = $sql->("SELECT 'q' || g FROM pg_catalog.generate_series(0, 255) g
                   WHERE 'q' || g NOT IN (SELECT queue FROM hopper.claim_positions())");
like($gone, qr/^q\d+$/, "one queue ($gone) lost its slot");
$sql->("SELECT hopper.queue_push('$gone', '{\"n\": 5}')");
is($sql->("SELECT payload->>'n' FROM hopper.queue_pull('$gone', 1)"), '5', "$gone pulls again");
is($sql->("SELECT count(*) FROM hopper.claim_positions() WHERE queue = '$gone'"),
	'1', "$gone holds a slot again");
is($sql->('SELECT count(*) FROM hopper.claim_positions()'), '256', 'still 256 in all');

# Positions are per database: another database sees none of these.
$node->safe_psql('postgres', 'CREATE DATABASE other');
$node->safe_psql('other', 'CREATE EXTENSION hopper');
is($node->safe_psql('other', 'SELECT count(*) FROM hopper.claim_positions()'),
	'0', 'another database lists only its own');

$node->stop;
done_testing();
