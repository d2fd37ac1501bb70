-- try(sql): runs a statement and returns 'ok' or 'SQLSTATE: message', so a test can show many
-- refused calls in a row. Job ids in messages depend on test order, so they read "job N".
CREATE FUNCTION pg_temp.try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || regexp_replace(SQLERRM, 'job [0-9]+', 'job N');
END $$;
