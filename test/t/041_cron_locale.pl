# Cron names are read the same in every database, whatever its locale: the names' letters are
# lowered as ASCII. With the C library's tolower, a database whose LC_CTYPE is the single-byte
# Turkish locale lowered the I of FRI to a dotless i, and refused '0 9 * * FRI' ("neither a
# number nor a name"). The locale is built for the test (localedef, from Debian's locales
# package) into the test's own directory, and the server finds it through LOCPATH.
use strict;
use warnings;

use FindBin;
use lib $FindBin::RealBin;
use HopperTAP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $locale = 'tr_TR.ISO-8859-9';
my $dir = "$PostgreSQL::Test::Utils::tmp_check/locales";
mkdir $dir;
my ($out, $err);
my $built = IPC::Run::run([ 'localedef', '-i', 'tr_TR', '-f', 'ISO-8859-9', "$dir/$locale" ],
	'>', \$out, '2>', \$err);
ok(-f "$dir/$locale/LC_CTYPE", "the locale $locale is built") or diag $err;

$ENV{LOCPATH} = $dir;
my $node = PostgreSQL::Test::Cluster->new('cron_locale');
# initdb's own locale is C: with LOCPATH set, the C library no longer reads the system's locale
# archive, where a developer's LANG may be.
$node->init(extra => ['--locale=C']);
$node->start;
$node->safe_psql('postgres',
	"CREATE DATABASE tr TEMPLATE template0 ENCODING 'LATIN5' "
	  . "LC_COLLATE '$locale' LC_CTYPE '$locale'");
$node->safe_psql('tr', 'CREATE EXTENSION hopper');
is($node->safe_psql('tr', "SELECT pg_catalog.current_setting('lc_ctype')"),
	$locale, "the database's LC_CTYPE is $locale");

for my $case ([ 'FRI', '2026-11-27 09:00:00+00' ], [ 'Fri', '2026-11-27 09:00:00+00' ],
	[ 'MON-FRI', '2026-11-26 09:00:00+00' ], [ 'TUE', '2026-12-01 09:00:00+00' ])
{
	my ($days, $want) = @$case;
	my ($ret, $next, $error) = $node->psql('tr',
		"SET TimeZone = 'UTC'; SELECT hopper.cron_next('0 9 * * $days', "
		  . "'2026-11-26 00:00:00+00')");
	is($next, $want, "'0 9 * * $days' is read in a Turkish database") or diag $error;
}
is( $node->safe_psql('tr',
		"SET TimeZone = 'UTC'; SELECT hopper.cron_next('0 9 1 JAN,DEC *', '2026-11-26 00:00+00')"),
	'2026-12-01 09:00:00+00', 'month names too');

$node->stop;
done_testing();
