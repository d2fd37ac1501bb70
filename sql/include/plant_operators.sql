-- Plants, in public, every operator PostgreSQL lacks for these pairs of types: an exact-type
-- operator on a caller's search_path wins over pg_catalog's own that needs a cast, and runs as the
-- caller. Each planted operator's call bumps public.planted_calls (a sequence, so that a call inside
-- a statement that then fails counts too); a test runs hopper's code and checks that it stayed at
-- zero. One statement, so that the C++ tests can send it as they read it (client/tests).
DO $plant$
DECLARE
    types text[] := ARRAY['smallint', 'integer', 'bigint', 'numeric', 'real', 'double precision',
        'timestamptz', 'timestamp', 'date', 'interval', 'text', 'jsonb', 'boolean', 'bigint[]',
        'text[]', 'hopper.job_state', 'oid', 'name', 'character varying'];
    ops text[] := ARRAY['+', '-', '*', '/', '%', '<', '>', '<=', '>=', '=', '<>', '||', '@>', '<@',
        '&&', '->', '->>', '#>', '#>>', '?', '~', '!~', '~~', '~*'];
    l text; r text; o text; n integer := 0;
BEGIN
    CREATE SEQUENCE public.planted_calls;
    FOREACH l IN ARRAY types LOOP
        FOREACH r IN ARRAY types LOOP
            FOREACH o IN ARRAY ops LOOP
                CONTINUE WHEN EXISTS (SELECT 1 FROM pg_operator
                    WHERE oprname = o AND oprleft = l::regtype AND oprright = r::regtype
                      AND oprnamespace = 'pg_catalog'::regnamespace);
                n := n + 1;
                EXECUTE format('CREATE FUNCTION public.planted_%s(%s, %s) RETURNS boolean '
                    'LANGUAGE sql AS $f$ SELECT pg_catalog.nextval(''public.planted_calls'') IS NULL $f$',
                    n, l, r);
                EXECUTE format('CREATE OPERATOR public.%s (LEFTARG = %s, RIGHTARG = %s, '
                    'FUNCTION = public.planted_%s)', o, l, r, n);
            END LOOP;
        END LOOP;
    END LOOP;
END
$plant$;
