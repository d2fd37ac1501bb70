-- Values stored out of line (TOAST: payloads, results, errors and progress details that stay
-- above about 2 kB compressed) come back whole from every function that returns them, for a job
-- that waits, runs, has finished, or waits in a packed row. job_status once handed such values
-- back from memory that SPI had already freed: other bytes, or a crash of the server.
SET hopper.notify = off;
-- 9.6 kB of random hex, which compression does not bring under the limit.
CREATE FUNCTION pg_temp.blob(tag text) RETURNS jsonb LANGUAGE sql AS $$
    SELECT jsonb_build_object(tag, (SELECT string_agg(md5(tag || g || random()), '')
                                    FROM generate_series(1, 300) g))
$$;
CREATE TEMP TABLE sent AS
SELECT pg_temp.blob('payload') AS payload, pg_temp.blob('detail') AS detail,
       pg_temp.blob('result') AS result, pg_temp.blob('error')::text AS error,
       pg_temp.blob('second') AS second, pg_temp.blob('third') AS third;

-- Stored out of line: even compressed, past the 2 kB a row keeps inline.
SELECT hopper.queue_push('lv', payload) AS id FROM sent \gset
SELECT pg_column_size(payload) > 4000 AS out_of_line FROM hopper.jobs WHERE id = :id;

-- Waiting.
SELECT s.payload = j.payload AS status_payload FROM sent s, hopper.job_status(:id) j;
SELECT s.payload = j.payload AS listed_payload FROM sent s, hopper.queue_jobs('lv', 'available', 1) j;

-- Running: the lease hands it out; progress and a failure store more.
SELECT s.payload = p.payload AS pulled_payload, p.lease_token AS tok
FROM sent s, hopper.queue_pull('lv', 1) p \gset
SELECT :'pulled_payload' AS pulled_payload;
SELECT hopper.queue_progress(:id, :tok, 0.5, (SELECT detail FROM sent)) AS progressed;
SELECT s.detail = j.progress_detail AS status_detail FROM sent s, hopper.job_status(:id) j;
SELECT hopper.queue_fail(:id, :tok, (SELECT error FROM sent), retry_in => '0') AS failed;
SELECT s.error = j.last_error AS status_error, s.error = j.errors->-1->>'error' AS logged_error
FROM sent s, hopper.job_status(:id) j;

-- Finished: the history row holds all of it.
SELECT lease_token AS tok FROM hopper.queue_pull('lv', 1) \gset
SELECT hopper.queue_complete(:id, :tok, (SELECT result FROM sent)) AS completed;
SELECT s.result = j.result AS status_result, s.payload = j.payload AS status_payload,
       s.error = j.last_error AS status_error
FROM sent s, hopper.job_status(:id) j;
SELECT s.result = j.result AS listed_result, s.payload = j.payload AS listed_payload
FROM sent s, hopper.queue_jobs('lv', 'completed', 1) j;

-- Packed: the waiting jobs of a row, then claimed by a take. Batches are packed while their
-- payloads average at most 1 kB: the two large ones go with 28 small ones.
SET hopper.pack_batches = on;
SELECT array_agg(id ORDER BY id) AS packed
FROM sent s, hopper.queue_push_batch('lv_packed',
    ARRAY[s.second, s.third] || array_fill('{}'::jsonb, ARRAY[28])) id \gset
RESET hopper.pack_batches;
SELECT count(*) AS packed_rows FROM hopper.job_batches WHERE queue = 'lv_packed';
SELECT s.third = j.payload AS status_payload FROM sent s, hopper.job_status((:'packed'::bigint[])[2]) j;
SELECT s.second = j.payload AS listed_payload
FROM sent s, hopper.queue_jobs('lv_packed', 'available', 30) j WHERE j.id = (:'packed'::bigint[])[1];
SELECT count(*) FILTER (WHERE t.payload IN (s.second, s.third)) = 2 AND count(*) = 30
    AS taken_payloads
FROM sent s, hopper.queue_take('lv_packed', 30) t;

-- The next job handed out by a completion.
SELECT hopper.queue_push('lv_next', second) IS NOT NULL AS pushed FROM sent;
SELECT s.second = p.payload AS next_payload
FROM sent s, hopper.queue_complete_pull(NULL, NULL, NULL, 'lv_next', 1) p;

SELECT hopper.queue_drop(q) AS dropped FROM unnest(ARRAY['lv', 'lv_packed', 'lv_next']) q;
