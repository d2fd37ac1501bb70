-- wait_for(cond, seconds): polls a boolean SQL expression every 50 ms for up to `seconds`; true as
-- soon as it holds. The backend status that reaper_status() reads is a snapshot per transaction, so
-- it is cleared before every look. my_reaper: this database's reaper, if any.
CREATE FUNCTION pg_temp.wait_for(cond text, seconds int DEFAULT 20) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    ok boolean;
BEGIN
    FOR i IN 1 .. seconds * 20 LOOP
        PERFORM pg_stat_clear_snapshot();
        EXECUTE 'SELECT ' || cond INTO ok;
        IF ok THEN RETURN true; END IF;
        PERFORM pg_sleep(0.05);
    END LOOP;
    RETURN false;
END $$;
CREATE VIEW pg_temp.my_reaper AS
    SELECT * FROM hopper.reaper_status() WHERE database = current_database();
