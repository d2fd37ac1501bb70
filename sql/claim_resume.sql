-- Claims start where the queue's last claim ended (hopper.claim_resume): every way a job can
-- appear below that point must still give pull order (priority, run_at, id).
SET hopper.notify = off;

SELECT hopper.queue_create('resume') AS created;
SELECT count(*) AS pushed FROM hopper.queue_push_batch('resume',
    (SELECT array_agg(jsonb_build_object('n', i) ORDER BY i) FROM generate_series(1, 6) i));
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume', 1);
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume', 1);

-- A push dated in the past lands below where the claims are: it is next.
SELECT hopper.queue_push('resume', '{"n": "backdated"}', run_at => now() - interval '1 hour') > 0
    AS pushed;
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume', 1);

-- A more urgent push, and a batch of them.
SELECT hopper.queue_push('resume', '{"n": "urgent"}', priority => -1) > 0 AS pushed;
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume', 1);
SELECT count(*) AS pushed FROM hopper.queue_push_batch('resume',
    ARRAY['{"n": "urgent-a"}', '{"n": "urgent-b"}']::jsonb[], priority => -2);
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume', 3);

-- An urgent job scheduled for later becomes due with no write at all: it still goes first once
-- its time comes, though the claims since went past its priority.
SELECT hopper.queue_push('resume', '{"n": "urgent-later"}', priority => -3,
                         run_at => now() + interval '1 hour') > 0 AS pushed;
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume', 1);
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume', 1, at => now() + interval '2 hours');

-- Two urgent jobs scheduled ahead, the nearer one pushed more than 32 pushes before the other:
-- a claim meanwhile may not move past the nearer one, which falls due with no write. (The claim
-- position went to the farther one's time, an hour ahead, and the nearer one waited for the next
-- start from the front, up to a second.)
SELECT hopper.queue_create('resume_sched') AS created;
SELECT hopper.queue_push('resume_sched', '{"n": "soon"}', priority => -1,
                         run_at => clock_timestamp() + interval '0.5 seconds') AS soon \gset
SELECT count(*) AS pushed FROM generate_series(1, 40) g,
    LATERAL hopper.queue_push('resume_sched', jsonb_build_object('n', g));
SELECT hopper.queue_push('resume_sched', '{"n": "later"}', priority => -1,
                         run_at => now() + interval '1 hour') > 0 AS pushed;
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume_sched', 1);
SELECT pg_sleep_until((SELECT run_at + interval '0.1 seconds' FROM hopper.jobs WHERE id = :soon));
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume_sched', 1);
SELECT hopper.queue_drop('resume_sched') AS dropped;

-- A job given back by a claim rolled back to a savepoint, in the same transaction.
BEGIN;
SAVEPOINT before_claim;
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume', 2);
ROLLBACK TO SAVEPOINT before_claim;
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume', 1);
COMMIT;

-- A job released by its worker keeps its place, below the job claimed after it: the claims had
-- moved past it, and the release brings them back to it.
SELECT count(*) AS pushed FROM hopper.queue_push_batch('resume',
    ARRAY['{"n": "r1"}', '{"n": "r2"}', '{"n": "r3"}']::jsonb[], priority => -4);
SELECT id AS r1, lease_token AS r1_token FROM hopper.queue_pull('resume', 1) \gset
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume', 1);
SELECT hopper.queue_release(:r1, :r1_token) AS released;
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume', 1);

-- A writer hopper cannot see (a direct UPDATE) may move a job below where the claims are: a
-- claim starts at the front at least once a second, so it waits a second at most.
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume', 1);
UPDATE hopper.jobs SET priority = -9 WHERE queue = 'resume' AND payload->>'n' = '6';
SELECT pg_sleep(1.1);
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume', 1);

-- Off: every claim starts at the front and sees such a job at once.
SELECT count(*) AS pushed FROM hopper.queue_push_batch('resume',
    ARRAY['{"n": "o1"}', '{"n": "o2"}']::jsonb[], priority => -10);
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume', 1);
SET hopper.claim_resume = off;
UPDATE hopper.jobs SET priority = -11 WHERE queue = 'resume' AND payload->>'n' = 'o2';
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume', 1);
RESET hopper.claim_resume;

-- Claims with a kinds filter or a clock of their own use the point but do not move it.
SELECT count(*) AS pushed FROM (
    SELECT hopper.queue_push('resume', jsonb_build_object('n', k), kind => k, priority => -5)
    FROM unnest(ARRAY['k1', 'k2']) k) s;
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume', 1, kinds => ARRAY['k2']);
SELECT payload->>'n' AS n FROM hopper.queue_pull('resume', 1);

SELECT hopper.queue_drop('resume') AS dropped;
