-- A queue with retention 0 keeps no history: a job that finishes (completed, dead, cancelled) is
-- deleted at once, as the plain-SQL queue does. A late call on such a job reads as a lost lease.
SET hopper.notify = off;
\i sql/include/try.sql
\i sql/include/wait_for.sql

SELECT hopper.queue_create('forgetful', retention => '0', max_attempts => 1) AS created;
SELECT hopper.queue_create('keeper') AS created;

-- Completed: gone from both tables; job_status no longer knows it.
SELECT hopper.queue_push('forgetful', '{"n": 1}') AS id \gset
SELECT lease_token AS tok FROM hopper.queue_pull('forgetful', 1) \gset
SELECT hopper.queue_complete(:id, :tok, '{"ok": true}') AS completed;
SELECT (SELECT count(*) FROM hopper.jobs WHERE id = :id) AS live,
       (SELECT count(*) FROM hopper.job_history WHERE id = :id) AS kept;
SELECT pg_temp.try(format('SELECT hopper.job_status(%s)', :id)) AS status;
-- Its hint names the ways an issued id can name no job; an id never issued hints at a wrong id
-- (it said "it finished and its queue's retention no longer keeps it", which cannot apply).
CREATE FUNCTION pg_temp.hint_of(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    h text;
BEGIN
    EXECUTE sql;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
    RETURN h;
END $$;
SELECT pg_temp.hint_of(format('SELECT hopper.job_status(%s)', :id)) AS hint;
SELECT pg_temp.hint_of('SELECT hopper.job_status(9000000000000)') AS never_issued,
       pg_temp.hint_of('SELECT hopper.queue_complete(9000000000000, 1)') AS complete_never_issued;
-- Its detail says the id was issued, which an id never issued lacks: a waiter tells a job that
-- finished unkept from a wrong id. So does a producer's; a role that may not read hopper.job_id_seq
-- cannot tell, and gets the plain answer rather than a permission error.
CREATE FUNCTION pg_temp.detail_of(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    d text;
BEGIN
    EXECUTE sql;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL;
    RETURN NULLIF(d, '');
END $$;
SELECT pg_temp.detail_of(format('SELECT hopper.job_status(%s)', :id)) AS issued;
SELECT pg_temp.detail_of('SELECT hopper.job_status(9000000000)') AS never_issued,
       pg_temp.detail_of('SELECT hopper.job_status(0)') AS never_issued_zero;
-- queue_retry tells them apart the same way (it raised the bare P0002 for both).
SELECT pg_temp.detail_of(format('SELECT hopper.queue_retry(%s)', :id)) AS retry_issued,
       pg_temp.hint_of('SELECT hopper.queue_retry(9000000000)') AS retry_never_issued;
CREATE ROLE regress_forgetful_reader;
GRANT USAGE ON SCHEMA hopper TO regress_forgetful_reader;
GRANT EXECUTE ON FUNCTION hopper.job_status(bigint) TO regress_forgetful_reader;
GRANT SELECT ON hopper.jobs, hopper.job_history, hopper.job_batches TO regress_forgetful_reader;
SET ROLE hopper_producer;
SELECT pg_temp.detail_of(format('SELECT hopper.job_status(%s)', :id)) IS NOT NULL AS producer_told;
RESET ROLE;
SET ROLE regress_forgetful_reader;
SELECT pg_temp.try(format('SELECT hopper.job_status(%s)', :id)) AS without_the_sequence,
       pg_temp.detail_of(format('SELECT hopper.job_status(%s)', :id)) AS detail;
RESET ROLE;
DROP OWNED BY regress_forgetful_reader;
DROP ROLE regress_forgetful_reader;
-- A second completion, a heartbeat, a failure or a release with the old token: the lease is
-- lost (false / NULL), not an unknown job.
SELECT hopper.queue_complete(:id, :tok) AS again,
       hopper.queue_heartbeat(:id, :tok) AS heartbeat,
       hopper.queue_fail(:id, :tok, 'late') AS failed,
       hopper.queue_release(:id, :tok) AS released,
       hopper.queue_cancel(:id) AS cancelled;
-- An id never issued is still unknown.
SELECT pg_temp.try($$SELECT hopper.queue_complete(9000000000, 1)$$) AS never_issued;
SELECT pg_temp.try($$SELECT hopper.queue_complete(0, 1)$$) AS never_issued_zero,
       pg_temp.try($$SELECT hopper.queue_heartbeat(-1, 1)$$) AS never_issued_negative,
       pg_temp.try($$SELECT hopper.queue_fail(-1, 1, 'x')$$) AS never_issued_fail,
       pg_temp.try($$SELECT hopper.queue_complete_many(ARRAY[-1], ARRAY[1])$$) AS never_issued_many;

-- Dead (its only attempt failed) and cancelled: the same.
SELECT hopper.queue_push('forgetful', '{"n": 2}') AS id2 \gset
SELECT lease_token AS tok2 FROM hopper.queue_pull('forgetful', 1) \gset
SELECT hopper.queue_fail(:id2, :tok2, 'broken') AS state;
SELECT hopper.queue_push('forgetful', '{"n": 3}') AS id3 \gset
SELECT hopper.queue_cancel(:id3) AS cancelled;
SELECT count(*) AS forgetful_history FROM hopper.job_history WHERE queue = 'forgetful';
SELECT pg_temp.try(format('SELECT hopper.queue_retry(%s)', :id2)) AS retry_dead;

-- A batch completion: the jobs it still holds complete; one finished before counts as lost.
SELECT count(*) AS pushed FROM hopper.queue_push_batch('forgetful',
    ARRAY['{"n": 4}', '{"n": 5}']::jsonb[]);
CREATE TEMP TABLE held AS SELECT id, lease_token FROM hopper.queue_pull('forgetful', 2);
SELECT count(*) AS completed
FROM hopper.queue_complete_many(ARRAY(SELECT id FROM held ORDER BY id) || :id,
                                ARRAY(SELECT lease_token FROM held ORDER BY id) || :tok::bigint,
                                ARRAY['{"r": 4}', '{"r": 5}', NULL]::jsonb[]);
SELECT count(*) AS completed_without_results
FROM hopper.queue_complete_many(ARRAY[:id], ARRAY[:tok::bigint]);
SELECT count(*) AS forgetful_live, (SELECT count(*) FROM hopper.job_history WHERE queue = 'forgetful')
       AS forgetful_history
FROM hopper.jobs WHERE queue = 'forgetful';

-- A lease that runs out on the last attempt: rescued as dead, and not kept.
SELECT hopper.queue_push('forgetful', '{"n": 6}') AS id6 \gset
SELECT count(*) AS pulled FROM hopper.queue_pull('forgetful', 1, lease => '1 second');
SELECT pg_temp.wait_for(format('NOT EXISTS (SELECT 1 FROM hopper.jobs WHERE id = %s)', :id6))
    AS rescued_and_gone;
SELECT count(*) AS forgetful_history FROM hopper.job_history WHERE queue = 'forgetful';
SELECT completed, dead, cancelled FROM hopper.queue_stats('forgetful');

-- Other queues keep their history as before, and the setting can change both ways.
SELECT hopper.queue_push('keeper', '{"n": 7}') AS id7 \gset
SELECT lease_token AS tok7 FROM hopper.queue_pull('keeper', 1) \gset
SELECT hopper.queue_complete(:id7, :tok7) AS completed;
SELECT state FROM hopper.job_status(:id7);
SELECT hopper.queue_create('forgetful', retention => '1 day') AS created;
SELECT hopper.queue_push('forgetful', '{"n": 8}') AS id8 \gset
SELECT lease_token AS tok8 FROM hopper.queue_pull('forgetful', 1) \gset
SELECT hopper.queue_complete(:id8, :tok8) AS completed;
SELECT state FROM hopper.job_status(:id8);

-- A worker role may tell a lost lease from an unknown id (it reads the last id issued).
SELECT hopper.queue_create('forgetful', retention => '0') AS created;
SELECT hopper.queue_push('forgetful', '{"n": 9}') AS id9 \gset
SELECT lease_token AS tok9 FROM hopper.queue_pull('forgetful', 1) \gset
CREATE ROLE regress_forgetful_worker;
GRANT hopper_worker TO regress_forgetful_worker;
SET ROLE regress_forgetful_worker;
SELECT hopper.queue_complete(:id9, :tok9) AS completed,
       hopper.queue_complete(:id9, :tok9) AS completed_again;
RESET ROLE;
DROP ROLE regress_forgetful_worker;
SELECT hopper.queue_drop('forgetful') AS dropped, hopper.queue_drop('keeper') AS dropped;

-- A late call keeps answering as a lost lease once no queue keeps no history: the id was issued,
-- whatever became of its queue since (retention raised, queue dropped).
SELECT count(*) AS queues_without_history FROM hopper.queues WHERE retention = '0';
SELECT hopper.queue_create('forgetful', retention => '0') AS created;
SELECT hopper.queue_push('forgetful', '{"n": 10}') AS id10 \gset
SELECT lease_token AS tok10 FROM hopper.queue_pull('forgetful', 1) \gset
SELECT hopper.queue_cancel(:id10) AS cancelled;
SELECT hopper.queue_create('forgetful', retention => '1 day') AS created;
SELECT hopper.queue_complete(:id10, :tok10) AS late_complete,
       hopper.queue_heartbeat(:id10, :tok10) AS late_heartbeat,
       hopper.queue_fail(:id10, :tok10, 'late') AS late_fail;
SELECT hopper.queue_push('forgetful', '{"n": 11}') AS id11 \gset
SELECT lease_token AS tok11 FROM hopper.queue_pull('forgetful', 1) \gset
SELECT hopper.queue_drop('forgetful') AS dropped;
SELECT hopper.queue_complete(:id11, :tok11) AS completed_after_drop;
SELECT pg_temp.try('SELECT hopper.queue_complete(9000000000, 1)') AS never_issued;
