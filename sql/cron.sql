-- Cron expressions, through hopper.cron_next(expression, after): the next matching time strictly
-- after `after`, in UTC. Every edge case of the syntax and of the calendar, then every refusal.
SET timezone = 'UTC';
\i sql/include/try.sql

SELECT e AS expression, a AS after, hopper.cron_next(e, a) AS next
FROM (VALUES
    -- every minute; strictly after: a time on the minute moves to the next one
    ('* * * * *',           '2026-03-10 12:00:00+00'::timestamptz),
    ('* * * * *',           '2026-03-10 12:00:30+00'),
    ('* * * * *',           '2026-03-10 12:00:59.999999+00'),
    -- steps, ranges, lists, and a step from a single start (5/10 = 5-59/10)
    ('*/15 * * * *',        '2026-03-10 12:07:00+00'),
    ('*/15 * * * *',        '2026-03-10 12:45:00+00'),
    ('1-30/5 * * * *',      '2026-03-10 12:27:00+00'),
    ('1-30/5 * * * *',      '2026-03-10 12:31:00+00'),
    ('5/10 * * * *',        '2026-03-10 12:56:00+00'),
    ('0,30 9-17 * * *',     '2026-03-10 17:30:00+00'),
    ('0,30 9-17 * * *',     '2026-03-10 08:59:00+00'),
    ('15,45 */6 * * *',     '2026-03-10 18:46:00+00'),
    ('0-5,50-55/2 * * * *', '2026-03-10 12:05:00+00'),
    -- leading zeros, however many, as Vixie cron reads them
    ('00000 0009 * * *',    '2026-03-10 12:05:00+00'),
    ('*/00015 * * * *',     '2026-03-10 12:05:00+00'),
    -- minute and hour wrap into the next day, year rollover
    ('30 23 * * *',         '2026-03-10 23:30:00+00'),
    ('59 23 31 12 *',       '2026-12-31 23:59:00+00'),
    ('0 0 1 1 *',           '2026-12-31 23:59:59+00'),
    ('* * * * *',           '2026-12-31 23:59:00+00'),
    -- months: numbers and names (any case), ranges of names
    ('0 0 1 jan,JUL *',     '2026-03-10 00:00:00+00'),
    ('0 0 1 Jun-Aug *',     '2026-08-01 00:00:00+00'),
    ('0 0 15 */4 *',        '2026-05-16 00:00:00+00'),
    -- days of the week: numbers, names, 0 and 7 both Sunday (2026-03-10 is a Tuesday)
    ('0 9 * * mon-fri',     '2026-03-13 09:00:00+00'),
    ('0 9 * * 0',           '2026-03-10 00:00:00+00'),
    ('0 9 * * 7',           '2026-03-10 00:00:00+00'),
    ('0 9 * * SAT,sun',     '2026-03-10 00:00:00+00'),
    ('0 9 * * 5-7',         '2026-03-14 09:00:00+00'),
    -- day-of-month and day-of-week both restricted: either one runs (the 13th, or any Friday)
    ('0 0 13 * fri',        '2026-03-10 00:00:00+00'),
    ('0 0 13 * fri',        '2026-03-13 00:00:00+00'),
    -- one of them starting with *: both must match (the 13th; the 13th if a Sunday or Friday;
    -- odd days that are Mondays)
    ('0 0 13 * *',          '2026-03-10 00:00:00+00'),
    ('0 0 13 * */5',        '2026-03-10 00:00:00+00'),
    ('0 0 */2 * mon',       '2026-03-10 00:00:00+00'),
    -- months without a 31st are skipped; the 30th skips February
    ('0 0 31 * *',          '2026-03-31 00:00:00+00'),
    ('0 0 30 * *',          '2026-01-30 00:00:00+00'),
    ('0 0 31 2,4,5 *',      '2026-01-01 00:00:00+00'),
    -- Feb 29: the next leap year; 2100 is not one
    ('0 0 29 2 *',          '2026-03-10 00:00:00+00'),
    ('0 0 29 2 *',          '2028-02-29 00:00:00+00'),
    ('0 12 29 feb *',       '2097-01-01 00:00:00+00'),
    ('0 0 28-31 2 *',       '2028-02-28 00:00:00+00'),
    ('0 0 28-31 2 *',       '2027-02-28 00:00:00+00'),
    -- last day of the year in a leap year, and an hour list across midnight
    ('0 0 31 dec *',        '2028-06-01 00:00:00+00'),
    ('0 22,2 * * *',        '2026-03-10 22:00:00+00'),
    -- macros
    ('@yearly',             '2026-03-10 00:00:00+00'),
    ('@annually',           '2026-03-10 00:00:00+00'),
    ('@monthly',            '2026-03-10 00:00:00+00'),
    ('@weekly',             '2026-03-10 00:00:00+00'),
    ('@daily',              '2026-03-10 12:00:00+00'),
    ('@midnight',           '2026-03-10 12:00:00+00'),
    ('@HOURLY',             '2026-03-10 12:00:00+00'),
    -- extra blanks between fields, and a line break
    (E'  0\t12  * *   * ',  '2026-03-10 12:00:00+00'),
    (E'0 12\n* * *',         '2026-03-10 12:00:00+00')
) AS t(e, a);

-- Times before 1970 and far ahead work the same way.
SELECT hopper.cron_next('0 0 29 2 *', '1899-03-01 00:00:00+00') AS before_1970,
       hopper.cron_next('0 0 1 1 *', '9999-06-01 00:00:00+00') AS far_ahead;
-- The default for `after` is now.
SELECT hopper.cron_next('* * * * *') > now() AS after_now,
       hopper.cron_next('* * * * *') <= now() + interval '1 minute' AS within_a_minute;
-- The result is in UTC whatever the session's time zone.
SET timezone = 'America/New_York';
SELECT hopper.cron_next('0 9 * * *', '2026-03-10 12:00:00+00') AS nine_utc;
SET timezone = 'UTC';

-- Refusals: 22023 naming the field and the bad token; NULLs are 22004.
SELECT e AS expression, pg_temp.try(format('SELECT hopper.cron_next(%L, now())', e)) AS refused
FROM (VALUES
    (''), ('* * * *'), ('* * * * * *'), ('@reboot'), ('@every 5m'),
    ('60 * * * *'), ('* 24 * * *'), ('* * 0 * *'), ('* * 32 * *'), ('* * * 0 *'), ('* * * 13 *'),
    ('* * * * 8'), ('*/0 * * * *'), ('*/x * * * *'), ('5-1 * * * *'), ('1,,2 * * * *'),
    ('1, * * * *'), ('a * * * *'), ('* * * * mon-foo'), ('* * * janu *'), ('* * * * -1'),
    ('1-/5 * * * *'), ('99999 * * * *'), ('000060 * * * *'), ('*/000 * * * *'),
    ('*/10000 * * * *'),
    -- never matches
    ('0 0 30 2 *'), ('0 0 31 4,6,9,11 *'), ('0 0 31 feb-apr/2 *')
) AS t(e);
-- Feb 29 on a Sunday (a day-of-week starting with * restricts the day-of-month further): 2032,
-- 2060, 2088, then 2128, 40 years on. The search covers the 400-year cycle of the calendar, so a
-- due tick always finds its next run (a 10-year search failed every schedule_run_due there).
SELECT hopper.cron_next('0 0 29 2 */7', '2026-01-01 00:00:00+00') AS first_sunday_feb29,
       hopper.cron_next('0 0 29 2 */7', '2088-03-01 00:00:00+00') AS after_2088;
-- With both day fields restricted, a day-of-month that never occurs still has its weekdays.
SELECT hopper.cron_next('0 0 30 2 mon', '2026-01-01 00:00:00+00') AS feb_mondays;
SELECT pg_temp.try($$SELECT hopper.cron_next(NULL, now())$$);
SELECT pg_temp.try($$SELECT hopper.cron_next('* * * * *', NULL)$$);
SELECT pg_temp.try($$SELECT hopper.cron_next('* * * * *', 'infinity')$$);
SELECT pg_temp.try($$SELECT hopper.cron_next('* * * * *', '294276-12-31 23:59:00+00')$$);
