-- params: none
-- Whether a queue is paused or limited: a claim from every queue then
-- passes over live runnable jobs of that queue, which stay (claim_start.rs).
SELECT EXISTS (SELECT FROM distlock.queue_settings s
                WHERE s.paused OR s.max_processing IS NOT NULL)
