-- Every argument of every function, given NULL and the edge values of its type while the others
-- hold ordinary values: each call returns, or raises an error whose SQLSTATE names what was wrong.
-- None may raise an internal error (class XX), hang, or take the server down (the C++ behind each
-- function runs inside the boundary wrapper).
\set own_db hopper_argument_sweep
\i sql/include/own_database.sql
SET hopper.notify = off;
SELECT hopper.queue_create('sweep') AS created;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('sweep', array_fill('{}'::jsonb, ARRAY[50]));

CREATE TEMP TABLE ordinary (type regtype, value text);
INSERT INTO ordinary VALUES
    ('text', $$'sweep'$$), ('integer', '1'), ('smallint', '0'), ('real', '0.5'),
    ('boolean', 'false'), ('jsonb', $${}$$::text), ('timestamptz', 'now()'),
    ('bigint', '(SELECT max(id) FROM hopper.jobs)'),
    ('bigint[]', 'ARRAY[(SELECT max(id) FROM hopper.jobs)]'), ('jsonb[]', $$ARRAY['{}'::jsonb]$$),
    ('text[]', 'NULL'), ('interval', 'NULL');
UPDATE ordinary SET value = quote_literal(value) WHERE type = 'jsonb'::regtype;
CREATE TEMP TABLE edge (type regtype, value text);
INSERT INTO edge VALUES
    ('text', $$''$$), ('text', $$repeat('x', 100000)$$), ('text', $$E'\x01'$$),
    ('text', $$'a b!'$$), ('text', $$'💥'$$),
    ('integer', '0'), ('integer', '-1'), ('integer', '2147483647'), ('integer', '(-2147483648)'),
    ('smallint', '-1'), ('smallint', '32767'),
    ('bigint', '0'), ('bigint', '-1'), ('bigint', '9223372036854775807'),
    ('bigint', '(-9223372036854775808)'),
    ('real', $$'NaN'$$), ('real', $$'Infinity'$$), ('real', '-1'), ('real', '2'),
    ('boolean', 'true'),
    ('interval', $$'0'$$), ('interval', $$'-1 s'$$), ('interval', $$'1 microsecond'$$),
    ('interval', $$'178000000 years'$$),
    ('timestamptz', $$'infinity'$$), ('timestamptz', $$'-infinity'$$),
    ('timestamptz', $$'294276-12-31 23:59:59'$$), ('timestamptz', $$'4713-01-01 BC'$$),
    ('jsonb', $$'[]'$$), ('jsonb', $$'1'$$), ('jsonb', $$'null'$$),
    ('jsonb', $$jsonb_build_object('a', repeat('y', 2000000))$$),
    ('text[]', $$'{}'$$), ('text[]', $$'{NULL}'$$), ('text[]', $$'{{a}}'$$),
    ('text[]', $$ARRAY['k1', 'k1']$$),
    ('bigint[]', $$'{}'$$), ('bigint[]', $$'{NULL}'$$), ('bigint[]', $$'{{1}}'$$),
    ('bigint[]', $$'{1,2,3}'$$), ('bigint[]', $$'[0:1]={1,2}'$$),
    ('jsonb[]', $$'{}'$$), ('jsonb[]', $$'{NULL}'$$), ('jsonb[]', $$ARRAY['[]'::jsonb]$$),
    ('jsonb[]', $$ARRAY['{}'::jsonb, '{}'::jsonb, '{}'::jsonb]$$);

CREATE TEMP TABLE outcome (call text, state text);
SET statement_timeout = '10s';
DO $sweep$
DECLARE
    f record;
    v text;
    args text[];
    call text;
    st text;
BEGIN
    -- (proargtypes is an oidvector, whose subscripts start at 0.)
    FOR f IN SELECT p.proname, ARRAY(SELECT unnest(p.proargtypes::oid[])::regtype) AS types
             FROM pg_proc p
             WHERE p.pronamespace = 'hopper'::regnamespace AND p.prorettype <> 'trigger'::regtype
               AND p.proname NOT IN ('reaper_stop', 'reaper_start')
             ORDER BY p.proname
    LOOP
        FOR i IN 1 .. coalesce(array_length(f.types, 1), 0) LOOP
            FOR v IN SELECT e.value FROM edge e WHERE e.type = f.types[i] UNION ALL SELECT 'NULL'
            LOOP
                args := ARRAY(SELECT coalesce((SELECT o.value FROM ordinary o WHERE o.type = t),
                                              'NULL') || '::' || t::text
                              FROM unnest(f.types) WITH ORDINALITY u(t, k) ORDER BY k);
                args[i] := v || '::' || f.types[i]::text;
                call := format('SELECT * FROM hopper.%I(%s)', f.proname,
                               array_to_string(args, ', '));
                BEGIN
                    EXECUTE call;
                    st := 'ok';
                EXCEPTION
                    WHEN query_canceled THEN st := '57014';
                    WHEN OTHERS THEN GET STACKED DIAGNOSTICS st = RETURNED_SQLSTATE;
                END;
                INSERT INTO outcome VALUES (call, st);
            END LOOP;
        END LOOP;
    END LOOP;
END
$sweep$;
RESET statement_timeout;

SELECT count(*) > 600 AS calls_made, count(*) FILTER (WHERE state = 'ok') > 100 AS some_returned,
       count(DISTINCT state) > 5 AS several_sqlstates
FROM outcome;
-- Internal errors, C++ failures (the boundary reports an exception that is not a PostgreSQL
-- error as class 38), system errors and calls that ran past the timeout: none.
SELECT left(call, 120) AS call, state FROM outcome
WHERE state LIKE 'XX%' OR state LIKE '38%' OR state LIKE '58%' OR state = '57014'
ORDER BY 1;
-- And the extension still works.
SELECT hopper.queue_push('after', '{}') IS NOT NULL AS pushed,
       (SELECT count(*) FROM hopper.queue_pull('after', 1)) AS pulled;

\c :regression_db
DROP DATABASE :"own_db";
