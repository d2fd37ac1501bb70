-- hopper: push one job.
SELECT hopper.queue_push(:q, '{"n": 1}');
