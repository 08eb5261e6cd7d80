//! Single-session tests of the job queue; tests/cluster covers many
//! consumers, killed consumers and PgBouncer.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_sql::{assert_sqlstate, enqueue, one, run};

    #[pg_test]
    fn queue_enqueue_uses_documented_defaults() {
        let id = enqueue("'email'");
        assert_eq!(
            one::<bool>(&format!(
                "SELECT payload = '{{}}'::jsonb AND status = 'pending' AND priority = 0 AND max_attempts = 5 \
                 AND attempts = 0 AND run_after <= now() AND worker_id IS NULL \
                 FROM distlock.jobs WHERE id = {id}"
            )),
            Some(true)
        );
    }

    /// The producing role is kept with the job, the calling role even when
    /// the statement runs as the extension's owner.
    #[pg_test]
    fn queue_a_job_records_the_role_that_enqueued_it() {
        run("CREATE ROLE queue_producer; SELECT distlock.grant_capability('queue_producer', 'producer'); \
             SET LOCAL ROLE queue_producer");
        let id = enqueue("'made-by-a-producer'");
        run("RESET ROLE");
        assert_eq!(
            one::<String>(&format!("SELECT producer_role::regrole::text FROM distlock.jobs WHERE id = {id}")),
            Some("queue_producer".to_string())
        );
    }

    /// Consumers take jobs of the queues they name only, in the order they
    /// name them; NULL means every queue, and a job named nowhere is in 'default'.
    #[pg_test]
    fn queue_consumers_take_jobs_of_their_queues_only() {
        let default = enqueue("'p'");
        let email = enqueue("'p', '{}', now(), 0, 5, 'email'");
        let thumb = enqueue("'thumb', '{}', now(), 9, 5, 'thumbs'");
        assert_eq!(one::<String>(&format!("SELECT queue FROM distlock.jobs WHERE id = {default}")), Some("default".into()));
        assert_eq!(
            one::<i64>("SELECT task_id FROM distlock.consume_task('mailer', p_queues => ARRAY['email'])"),
            Some(email),
            "a consumer of queue email gets the email job, not the higher-priority thumbnail"
        );
        assert_eq!(one::<i64>("SELECT count(*) FROM distlock.consume_task('mailer', p_queues => ARRAY['email'])"), Some(0));
        let later = enqueue("'p2', '{}', now(), 0, 5, 'email'");
        assert_eq!(
            one::<String>(
                "SELECT string_agg(task_id::text, ',' ORDER BY ordinality) \
                   FROM distlock.consume_tasks(10, 'both', p_queues => ARRAY['email', 'thumbs', 'email']) WITH ORDINALITY"
            ),
            Some(format!("{later},{thumb}")),
            "queues are tried in the order given"
        );
        assert_eq!(one::<i64>("SELECT task_id FROM distlock.consume_task('any')"), Some(default));
        assert_sqlstate("distlock.consume_task('w', p_queues => ARRAY[]::text[])", "22023");
        assert_sqlstate("distlock.consume_task('w', p_queues => ARRAY['email', NULL])", "22004");
        assert_sqlstate("distlock.consume_tasks(2, 'w', p_queues => ARRAY[' '])", "22023");
        assert_sqlstate("distlock.enqueue_task('x', p_queue => NULL)", "22004");
        assert_sqlstate("distlock.enqueue_task('x', p_queue => '')", "22023");
    }

    /// Each claimed job says which queue it came from and its group, in the
    /// last two columns of consume_task, consume_tasks and
    /// settle_and_consume_tasks (after `outcome` there), so that readers of
    /// the other columns by position keep working (issue 47, item 6; issue 49).
    #[pg_test]
    fn queue_claims_name_each_jobs_queue_and_group_in_their_last_columns() {
        for (function, before_last) in [
            ("consume_task(text, interval, interval, text[])", "worker_id"),
            ("consume_tasks(integer, text, interval, interval, text[])", "worker_id"),
            ("settle_and_consume_tasks(integer, text, bigint[], integer[], bigint[], integer[], text[], interval, interval, text[])", "outcome"),
        ] {
            assert_eq!(
                one::<String>(&format!(
                    "SELECT a[array_length(a, 1) - 2] || ',' || a[array_length(a, 1) - 1] || ',' || a[array_length(a, 1)] \
                       FROM (SELECT proargnames AS a FROM pg_catalog.pg_proc WHERE oid = 'distlock.{function}'::regprocedure) p"
                )),
                Some(format!("{before_last},queue,group_key")),
                "{function}"
            );
        }
        let email = enqueue("'mail', '{}', now(), 0, 5, 'email'");
        let thumb = enqueue("'resize', '{}', now(), 0, 5, 'thumbs'");
        let both = "p_queues => ARRAY['email', 'thumbs']";
        assert_eq!(
            one::<String>(&format!("SELECT task_id || ':' || queue FROM distlock.consume_task('w', {both})")),
            Some(format!("{email}:email"))
        );
        assert_eq!(
            one::<String>(&format!("SELECT task_id || ':' || queue FROM distlock.consume_tasks(5, 'w', {both})")),
            Some(format!("{thumb}:thumbs"))
        );
        let later = enqueue("'resize', '{}', now(), 0, 5, 'thumbs'");
        assert_eq!(
            one::<String>(&format!(
                "SELECT string_agg(task_id || ':' || outcome || ':' || coalesce(queue, 'NULL'), ',' ORDER BY outcome DESC) \
                   FROM distlock.settle_and_consume_tasks(5, 'w', p_completed => ARRAY[{email}, {thumb}]::bigint[], \
                                                        p_completed_attempts => ARRAY[1, 9], {both})"
            )),
            Some(format!("{thumb}:refused:NULL,{later}:claimed:thumbs")),
            "a refused settle (attempt 9 is not held) has no queue"
        );
    }

    /// A unique key admits one unfinished job per queue: enqueueing it again
    /// returns the queued job's id, while the job is pending, processing or
    /// failed (awaiting its retry); a completed or dead job frees the key.
    #[pg_test]
    fn queue_a_unique_key_admits_one_unfinished_job_per_queue() {
        let unique = |queue: &str| enqueue(&format!("'sync', '{{}}', now(), 0, 2, '{queue}', 'account-7'"));
        let first = unique("sync");
        assert_eq!(unique("sync"), first, "pending: the queued job's id");
        assert_ne!(unique("other"), first, "the same key in another queue is another job");
        let keyless = enqueue("'sync', '{}', now(), 0, 2, 'sync'");
        assert_ne!(keyless, first, "jobs without a key are never merged");
        run(&format!("DELETE FROM distlock.task_queue WHERE id = {keyless}"));
        let claimed = || one::<i32>("SELECT attempts FROM distlock.consume_task('w', p_queues => ARRAY['sync'])");
        assert_eq!(claimed(), Some(1));
        assert_eq!(unique("sync"), first, "processing: still the same job");
        run(&format!("SELECT distlock.fail_task({first}, 'boom', 'w')"));
        assert_eq!(unique("sync"), first, "failed, awaiting its retry: still the same job");
        run(&format!("UPDATE distlock.task_queue SET run_after = now() WHERE id = {first}"));
        assert_eq!(claimed(), Some(2));
        run(&format!("SELECT distlock.fail_task({first}, 'boom again', 'w')"));
        assert_eq!(one::<String>(&format!("SELECT status FROM distlock.jobs WHERE id = {first}")), Some("dead".into()));
        let second = unique("sync");
        assert_ne!(second, first, "a dead job frees its key");
        assert_eq!(claimed(), Some(1));
        run(&format!("SELECT distlock.complete_task({second}, 'w')"));
        let third = unique("sync");
        assert!(third != first && third != second, "a completed job frees its key");
        assert_sqlstate("distlock.enqueue_task('x', p_unique_key => '')", "22023");
        assert_sqlstate("distlock.enqueue_task('x', p_unique_key => repeat('k', 1001))", "22023");
    }

    /// settle_and_consume_tasks completes and fails the jobs it is given
    /// and claims the next ones in the same call; a settle the worker no
    /// longer holds (a stale attempt, another worker's job) is reported as
    /// refused and changes nothing.
    #[pg_test]
    fn queue_settle_and_consume_settles_and_claims_in_one_call() {
        let jobs: Vec<i64> = (0..5).map(|_| enqueue("'p'")).collect();
        run("SELECT * FROM distlock.consume_tasks(2, 'w')");
        run("SELECT * FROM distlock.consume_task('other')");
        let outcome = |sql: &str| {
            one::<String>(&format!(
                "SELECT string_agg(task_id || ':' || outcome, ',' ORDER BY outcome DESC, task_id) \
                   FROM distlock.settle_and_consume_tasks({sql})"
            ))
        };
        assert_eq!(
            outcome(&format!(
                "2, 'w', ARRAY[{}], ARRAY[1], ARRAY[{}, {}], ARRAY[1, 1], ARRAY['boom', 'not mine']",
                jobs[0], jobs[1], jobs[2]
            )),
            Some(format!("{}:refused,{}:claimed,{}:claimed", jobs[2], jobs[3], jobs[4])),
            "job 3 is another worker's: refused; two new jobs claimed"
        );
        assert_eq!(
            one::<String>(&format!(
                "SELECT string_agg(status || ':' || coalesce(last_error, '-') || ':' || coalesce(worker_id, '-'), ',' ORDER BY id) \
                   FROM distlock.jobs WHERE id IN ({}, {}, {})",
                jobs[0], jobs[1], jobs[2]
            )),
            Some("completed:-:w,failed:boom:w,processing:-:other".into())
        );
        assert_eq!(
            outcome(&format!("1, 'w', ARRAY[{}, {}], ARRAY[2, 1]", jobs[3], jobs[4])),
            Some(format!("{}:refused", jobs[3])),
            "a stale attempt is refused, the other completed, and the empty queue gives nothing"
        );
        assert_eq!(one::<String>(&format!("SELECT status FROM distlock.jobs WHERE id = {}", jobs[4])), Some("completed".into()));
        assert_eq!(
            one::<i64>(&format!(
                "SELECT count(*) FROM distlock.settle_and_consume_tasks(1, 'w', ARRAY[{}], ARRAY[1]) WHERE outcome = 'claimed'",
                jobs[3]
            )),
            Some(0)
        );
        assert_sqlstate("distlock.settle_and_consume_tasks(1, 'w', ARRAY[1, 2], ARRAY[1])", "22023");
        assert_sqlstate("distlock.settle_and_consume_tasks(1, 'w', p_failed => ARRAY[1], p_failed_errors => ARRAY['a', 'b'])", "22023");
        assert_sqlstate("distlock.settle_and_consume_tasks(1, 'w', ARRAY[NULL]::bigint[])", "22004");
        assert_sqlstate("distlock.settle_and_consume_tasks(0, 'w')", "22023");
    }

    /// A call that settled something does not wait for a job: its settles
    /// would stay uncommitted meanwhile. One that settled nothing waits.
    #[pg_test]
    fn queue_settle_and_consume_waits_only_when_it_settled_nothing() {
        let job = enqueue("'p'");
        run("SELECT * FROM distlock.consume_task('w')");
        let seconds = |call: &str| {
            one::<f64>(&format!(
                "WITH t0 AS (SELECT clock_timestamp() AS t), c AS (SELECT count(*) FROM t0, {call}) \
                 SELECT extract(epoch FROM clock_timestamp() - (SELECT t FROM t0))::float8 FROM c"
            ))
            .expect("elapsed")
        };
        let settled = seconds(&format!("distlock.settle_and_consume_tasks(1, 'w', ARRAY[{job}], p_wait => '30 seconds')"));
        assert!(settled < 15.0, "a call that completed a job waited {settled} s for another");
        assert_eq!(one::<String>(&format!("SELECT status FROM distlock.jobs WHERE id = {job}")), Some("completed".into()));
        let idle = seconds("distlock.settle_and_consume_tasks(1, 'w', p_wait => '0.3 seconds')");
        assert!(idle >= 0.3, "a call that settled nothing returned after {idle} s of its 0.3 s wait");
    }

    /// A paused queue hands out nothing, to consumers of that queue or of
    /// every queue, until it is resumed; distlock.queues shows it.
    #[pg_test]
    fn queue_a_paused_queue_hands_out_nothing_until_resumed() {
        let email = enqueue("'p', '{}', now(), 0, 5, 'email'");
        let other = enqueue("'p', '{}', now(), 0, 5, 'other'");
        assert_eq!(one::<bool>("SELECT distlock.pause_queue('email')"), Some(true));
        assert_eq!(one::<bool>("SELECT distlock.pause_queue('email')"), Some(false), "already paused");
        assert_eq!(one::<i64>("SELECT count(*) FROM distlock.consume_task('w', p_queues => ARRAY['email'])"), Some(0));
        assert_eq!(
            one::<String>("SELECT string_agg(task_id::text, ',') FROM distlock.consume_tasks(10, 'w')"),
            Some(other.to_string()),
            "a consumer of every queue leaves the paused queue's jobs"
        );
        assert_eq!(
            one::<String>("SELECT paused || ':' || pending || ':' || processing FROM distlock.queues WHERE name = 'email'"),
            Some("true:1:0".into())
        );
        assert_eq!(one::<bool>("SELECT distlock.resume_queue('email')"), Some(true));
        assert_eq!(one::<bool>("SELECT distlock.resume_queue('email')"), Some(false), "already running");
        assert_eq!(one::<bool>("SELECT distlock.resume_queue('never-paused')"), Some(false));
        assert_eq!(one::<i64>("SELECT task_id FROM distlock.consume_task('w', p_queues => ARRAY['email'])"), Some(email));
        assert_sqlstate("distlock.pause_queue(NULL)", "22004");
    }

    /// A queue with a concurrency limit hands out jobs while fewer than the
    /// limit are processing, to consumers naming it and to those taking
    /// every queue (after the other queues' jobs).
    #[pg_test]
    fn queue_a_limited_queue_hands_out_up_to_its_limit() {
        for _ in 0..6 {
            enqueue("'p', '{}', now(), 0, 5, 'lim'");
        }
        let other = enqueue("'p', '{}', now(), 0, 5, 'other'");
        run("SELECT distlock.set_queue_limit('lim', 3)");
        let claimed = |sql: &str| one::<i64>(&format!("SELECT count(*) FROM distlock.consume_tasks({sql})"));
        assert_eq!(claimed("10, 'a', p_queues => ARRAY['lim']"), Some(1), "a limit of 3: three claims of one job at a time");
        assert_eq!(claimed("10, 'b', p_queues => ARRAY['lim']"), Some(1));
        assert_eq!(
            one::<String>(&format!(
                "SELECT count(*) || ':' || bool_or(task_id = {other}) || ':' || count(*) FILTER (WHERE task_id <> {other}) \
                   FROM distlock.consume_tasks(10, 'c')"
            )),
            Some("2:true:1".into()),
            "a consumer of every queue takes the other queue's job, then one of the limited queue's"
        );
        assert_eq!(claimed("10, 'd', p_queues => ARRAY['lim']"), Some(0), "three processing: full");
        assert_eq!(
            one::<String>("SELECT max_processing || ':' || processing || ':' || pending FROM distlock.queues WHERE name = 'lim'"),
            Some("3:3:3".into())
        );
        run("SELECT distlock.set_queue_limit('lim', NULL)");
        assert_eq!(claimed("10, 'c'"), Some(3), "no limit any more");
        assert_sqlstate("distlock.set_queue_limit('lim', 0)", "22023");
        assert_sqlstate("distlock.set_queue_limit(NULL, 1)", "22004");
    }

    /// A claim writes a job's claimed version as a new row (see
    /// queue_consume.sql): each claim statement names every column of
    /// task_queue, so a column added later cannot silently fall back to its
    /// default when a job is claimed, and the values a claim does not change
    /// come through unchanged.
    #[pg_test]
    fn queue_a_claim_carries_every_column_of_the_job_over() {
        let columns = one::<String>(
            "SELECT string_agg(attname, ',' ORDER BY attname) FROM pg_catalog.pg_attribute
              WHERE attrelid = 'distlock.task_queue'::regclass AND attnum > 0 AND NOT attisdropped",
        )
        .expect("columns");
        for sql in
            [include_str!("../../sql/queries/queue_consume.sql"), include_str!("../../sql/queries/queue_consume_queue.sql")]
        {
            let list = sql
                .split_once("INSERT INTO distlock.task_queue AS q (")
                .and_then(|(_, rest)| rest.split_once(')'))
                .map(|(list, _)| list)
                .expect("the claim's INSERT column list");
            let mut named: Vec<&str> = list.split(',').map(str::trim).collect();
            named.sort_unstable();
            assert_eq!(named.join(","), columns, "{}", sql.lines().nth(1).unwrap_or_default());
        }

        let id = enqueue("'carried', '{\"n\": 7}', now() - interval '1 hour', 3, 9, 'carry', 'key-1'");
        run(&format!(
            "UPDATE distlock.task_queue SET last_error = 'before', created_at = now() - interval '2 hours' WHERE id = {id}"
        ));
        let before = format!(
            "SELECT task_name, payload, created_at, max_attempts, run_after, priority, last_error, producer_role, queue, unique_key
               FROM distlock.task_queue WHERE id = {id}"
        );
        run(&format!("CREATE TEMP TABLE job_before AS {before}"));
        assert_eq!(one::<i64>("SELECT task_id FROM distlock.consume_task('carrier', p_queues => ARRAY['carry'])"), Some(id));
        assert_eq!(
            one::<bool>(&format!(
                "SELECT (SELECT count(*) FROM ({before} EXCEPT SELECT * FROM job_before) changed) = 0
                    AND status = 'processing' AND worker_id = 'carrier' AND attempts = 1
                   FROM distlock.task_queue WHERE id = {id}"
            )),
            Some(true)
        );
    }

    #[pg_test]
    fn queue_consume_takes_highest_priority_then_oldest() {
        let low = enqueue("'a', '{\"n\": 1}'");
        let high_old = enqueue("'b', '{\"n\": 2}', now(), 5");
        let high_new = enqueue("'c', '{\"n\": 3}', now(), 5");
        let _delayed = enqueue("'d', '{}', now() + interval '1 hour', 100");
        run("SET LOCAL application_name = 'consumer-app'");
        let first = Spi::get_three::<i64, String, i32>(
            "SELECT task_id, worker_id, attempts FROM distlock.consume_task()",
        )
        .expect("row");
        assert_eq!(first, (Some(high_old), Some("consumer-app".into()), Some(1)));
        let batch = one::<String>(
            "SELECT string_agg(task_id::text, ',' ORDER BY priority DESC, task_id) FROM distlock.consume_tasks(10, 'w2')",
        );
        assert_eq!(batch, Some(format!("{high_new},{low}")));
        assert_eq!(one::<i64>("SELECT count(*) FROM distlock.consume_task('w3')"), Some(0));
        assert_eq!(
            one::<bool>(&format!(
                "SELECT status = 'processing' AND lease_expires_at > now() + interval '4 minutes' \
                 AND started_at IS NOT NULL FROM distlock.jobs WHERE id = {low}"
            )),
            Some(true)
        );
        assert_eq!(
            one::<String>("SELECT payload->>'n' FROM distlock.jobs WHERE id = (SELECT min(id) FROM distlock.jobs)"),
            Some("1".into())
        );
    }

    #[pg_test]
    fn queue_payload_is_stored_and_returned_exactly() {
        let payload = r#"{"d": 0.1234567890123456789, "n": 12345678901234567890123}"#;
        let id = enqueue(&format!("'exact', '{payload}'"));
        assert_eq!(
            one::<String>(&format!("SELECT payload::text FROM distlock.jobs WHERE id = {id}")),
            Some(payload.into())
        );
        assert_eq!(one::<String>("SELECT payload::text FROM distlock.consume_task('w')"), Some(payload.into()));
    }

    /// enqueue_tasks queues one job per payload, exactly as given, with ids
    /// in the array's order, in the queue named, and refuses a NULL payload
    /// by its position.
    #[pg_test]
    fn queue_enqueue_tasks_queues_one_job_per_payload_in_order() {
        let payloads = r#"ARRAY['{"n": 1}', '{"n": 12345678901234567890123}', '{"n": 3}']::jsonb[]"#;
        let ids = one::<String>(&format!(
            "SELECT string_agg(id::text, ',' ORDER BY o) \
               FROM distlock.enqueue_tasks('many', {payloads}, now(), 4, 2, 'bulk') WITH ORDINALITY AS e(id, o)"
        ))
        .expect("ids");
        assert_eq!(
            one::<String>(&format!(
                "SELECT string_agg(payload::text || '/' || queue || '/' || priority || '/' || max_attempts, ';' ORDER BY id) \
                   FROM distlock.jobs WHERE id IN ({ids})"
            )),
            Some(r#"{"n": 1}/bulk/4/2;{"n": 12345678901234567890123}/bulk/4/2;{"n": 3}/bulk/4/2"#.to_string())
        );
        assert_eq!(
            one::<bool>(&format!("SELECT '{{{ids}}}'::bigint[] = (SELECT array_agg(id ORDER BY id) FROM distlock.jobs)")),
            Some(true),
            "ids in the array's order, the only jobs queued"
        );
        assert_eq!(one::<i64>("SELECT count(*) FROM distlock.enqueue_tasks('none', '{}'::jsonb[])"), Some(0));
        assert_sqlstate("distlock.enqueue_tasks('many', ARRAY['{}', NULL, '{}']::jsonb[])", "22004");
        run("DO $t$ BEGIN PERFORM distlock.enqueue_tasks('many', ARRAY['{}', NULL, '{}']::jsonb[]); \
             EXCEPTION WHEN null_value_not_allowed THEN \
               IF SQLERRM <> 'p_payloads must not hold NULL, got one at position 2' THEN RAISE EXCEPTION 'got %', SQLERRM; END IF; \
             END $t$");
        assert_eq!(one::<i64>("SELECT count(*) FROM distlock.jobs"), Some(3), "a refused call queues nothing");
    }

    #[pg_test]
    fn queue_a_payload_beyond_float_range_blocks_nothing() {
        let huge = enqueue("'huge', '{\"n\": 1e400}', now(), 10");
        let next = enqueue("'next', '{\"n\": 1}'");
        assert_eq!(
            one::<String>("SELECT task_id || ':' || (payload->>'n') FROM distlock.consume_task('w')"),
            Some(format!("{huge}:{}", "1".to_string() + &"0".repeat(400)))
        );
        assert_eq!(one::<i64>("SELECT task_id FROM distlock.consume_task('w')"), Some(next));
    }

    #[pg_test]
    fn queue_complete_only_by_the_holding_worker() {
        let id = enqueue("'a'");
        assert_eq!(one::<i64>("SELECT task_id FROM distlock.consume_task('w1')"), Some(id));
        assert_eq!(one::<bool>(&format!("SELECT distlock.complete_task({id}, 'w2')")), Some(false));
        assert_eq!(one::<bool>(&format!("SELECT distlock.complete_task({id}, 'w1')")), Some(true));
        assert_eq!(one::<bool>(&format!("SELECT distlock.complete_task({id}, 'w1')")), Some(false));
        assert_eq!(
            one::<bool>(&format!(
                "SELECT status = 'completed' AND completed_at IS NOT NULL AND lease_expires_at IS NULL \
                 FROM distlock.jobs WHERE id = {id}"
            )),
            Some(true)
        );
    }

    #[pg_test]
    fn queue_failure_backs_off_then_dies_after_max_attempts() {
        let id = enqueue("'a', '{}', now(), 0, 2");
        one::<i64>("SELECT task_id FROM distlock.consume_task('w1')");
        assert_eq!(one::<bool>(&format!("SELECT distlock.fail_task({id}, 'smtp down', 'w1')")), Some(true));
        assert_eq!(
            one::<bool>(&format!(
                "SELECT status = 'failed' AND last_error = 'smtp down' \
                 AND run_after BETWEEN clock_timestamp() + interval '4 seconds' AND clock_timestamp() + interval '10 seconds' \
                 FROM distlock.jobs WHERE id = {id}"
            )),
            Some(true)
        );
        // Not runnable during its backoff.
        assert_eq!(one::<i64>("SELECT count(*) FROM distlock.consume_task('w1')"), Some(0));
        run(&format!("UPDATE distlock.task_queue SET run_after = now() - interval '1 second' WHERE id = {id}"));
        assert_eq!(one::<i32>("SELECT attempts FROM distlock.consume_task('w1')"), Some(2));
        assert_eq!(one::<bool>(&format!("SELECT distlock.fail_task({id}, 'still down', 'w1')")), Some(true));
        assert_eq!(
            one::<String>(&format!("SELECT status::text FROM distlock.jobs WHERE id = {id}")),
            Some("dead".into())
        );
    }

    #[pg_test]
    fn queue_expired_lease_is_claimed_again_and_the_old_worker_is_refused() {
        let id = enqueue("'a'");
        one::<i64>("SELECT task_id FROM distlock.consume_task('slow', '1 millisecond')");
        run("SELECT pg_sleep(0.01)");
        let again = Spi::get_two::<i64, i32>("SELECT task_id, attempts FROM distlock.consume_task('fast')")
            .expect("row");
        assert_eq!(again, (Some(id), Some(2)));
        assert_eq!(one::<bool>(&format!("SELECT distlock.complete_task({id}, 'slow')")), Some(false));
        assert_eq!(one::<bool>(&format!("SELECT distlock.extend_task_lease({id}, '1 minute', 'slow')")), Some(false));
        assert_eq!(one::<bool>(&format!("SELECT distlock.fail_task({id}, 'x', 'slow')")), Some(false));
        assert_eq!(one::<bool>(&format!("SELECT distlock.complete_task({id}, 'fast')")), Some(true));
    }

    #[pg_test]
    fn queue_a_stale_attempt_of_the_same_worker_cannot_settle_the_next() {
        let id = enqueue("'a'");
        let first = one::<i32>("SELECT attempts FROM distlock.consume_task('w', '1 millisecond')").expect("attempt");
        run("SELECT pg_sleep(0.01)");
        let second = one::<i32>("SELECT attempts FROM distlock.consume_task('w')").expect("attempt");
        assert_eq!((first, second), (1, 2));
        // The first consumer, late, names its own attempt: refused.
        assert_eq!(one::<bool>(&format!("SELECT distlock.extend_task_lease({id}, '1 hour', 'w', {first})")), Some(false));
        assert_eq!(one::<bool>(&format!("SELECT distlock.fail_task({id}, 'late', 'w', {first})")), Some(false));
        assert_eq!(one::<bool>(&format!("SELECT distlock.complete_task({id}, 'w', {first})")), Some(false));
        assert_eq!(
            one::<String>(&format!("SELECT status || '/' || attempts FROM distlock.jobs WHERE id = {id}")),
            Some("processing/2".into())
        );
        assert_eq!(one::<bool>(&format!("SELECT distlock.extend_task_lease({id}, '1 hour', 'w', {second})")), Some(true));
        assert_eq!(one::<bool>(&format!("SELECT distlock.complete_task({id}, 'w', {second})")), Some(true));
        // Without an attempt the simple forms still settle whatever the worker holds.
        let other = enqueue("'b'");
        one::<i64>("SELECT task_id FROM distlock.consume_task('w')");
        assert_eq!(one::<bool>(&format!("SELECT distlock.complete_task({other}, 'w')")), Some(true));
    }

    #[pg_test(error = "p_attempt must not be NULL")]
    fn queue_null_attempt_is_an_error() {
        let id = enqueue("'a'");
        run(&format!("SELECT distlock.complete_task({id}, 'w', NULL::int)"));
    }

    #[pg_test]
    fn queue_expired_lease_without_attempts_left_is_dead() {
        let id = enqueue("'a', '{}', now(), 0, 1");
        one::<i64>("SELECT task_id FROM distlock.consume_task('w', '1 millisecond')");
        run("SELECT pg_sleep(0.01)");
        assert_eq!(one::<i64>("SELECT count(*) FROM distlock.consume_task('w2')"), Some(0));
        assert_eq!(
            one::<bool>(&format!(
                "SELECT status = 'dead' AND last_error LIKE 'lease expired%' FROM distlock.jobs WHERE id = {id}"
            )),
            Some(true)
        );
    }

    /// A job that dies at a claim's takeover, or in the sweep, says so and
    /// carries no takeover mark ('lease expired (worker ', claim.rs): once
    /// retried it sits in the runnable index, where a marked job moved no
    /// claim's start (every claim of such jobs read from the head). Review
    /// of 107107f.
    #[pg_test]
    fn queue_a_job_that_dies_when_its_lease_expires_carries_no_takeover_mark() {
        let at_claim = enqueue("'a', '{}', now(), 0, 1");
        one::<i64>("SELECT task_id FROM distlock.consume_task('w', '1 millisecond')");
        run("SELECT pg_sleep(0.01)");
        assert_eq!(one::<i64>("SELECT count(*) FROM distlock.consume_task('w2')"), Some(0), "it dies at the takeover");
        let in_sweep = enqueue("'b', '{}', now(), 0, 1");
        one::<i64>("SELECT task_id FROM distlock.consume_task('w', '1 millisecond')");
        run("SELECT pg_sleep(0.01)");
        run("SELECT count(*) FROM distlock.check_and_recover_timeout_tasks()");
        run("SELECT distlock.retry_dead_jobs()");
        for id in [at_claim, in_sweep] {
            assert_eq!(
                one::<String>(&format!("SELECT status || ': ' || last_error FROM distlock.jobs WHERE id = {id}")),
                Some("pending: lease expired, no attempt left (worker w)".into())
            );
        }
    }

    #[pg_test]
    fn queue_sweep_returns_expired_leases_to_the_queue() {
        let id = enqueue("'a'");
        one::<i64>("SELECT task_id FROM distlock.consume_task('w', '1 millisecond')");
        run("SELECT pg_sleep(0.01)");
        run("SELECT * FROM distlock.check_and_recover_timeout_tasks()");
        assert_eq!(
            one::<String>(&format!("SELECT status::text FROM distlock.jobs WHERE id = {id}")),
            Some("pending".into())
        );
        assert_eq!(
            one::<i64>("SELECT jobs FROM distlock.queue_stats WHERE task_name = 'a' AND status = 'pending'"),
            Some(1)
        );
    }

    #[pg_test]
    fn queue_extend_lease_moves_the_expiry() {
        let id = enqueue("'a'");
        one::<i64>("SELECT task_id FROM distlock.consume_task('w', '1 minute')");
        assert_eq!(one::<bool>(&format!("SELECT distlock.extend_task_lease({id}, '2 hours', 'w')")), Some(true));
        assert_eq!(
            one::<bool>(&format!(
                "SELECT lease_expires_at > now() + interval '119 minutes' FROM distlock.jobs WHERE id = {id}"
            )),
            Some(true)
        );
    }

    #[pg_test(error = "job 123456789 does not exist")]
    fn queue_unknown_job_is_an_error() {
        run("SELECT distlock.complete_task(123456789, 'w')");
    }

    #[pg_test(error = "p_lease must be positive, got -00:05:00")]
    fn queue_negative_lease_is_an_error() {
        run("SELECT * FROM distlock.consume_task('w', '-5 minutes')");
    }

    #[pg_test(error = "p_lease must be positive, got 00:00:00")]
    fn queue_zero_lease_extension_is_an_error() {
        let id = enqueue("'a'");
        run(&format!("SELECT distlock.extend_task_lease({id}, '0', 'w')"));
    }

    /// Issue 44, item 6: a job lease longer than distlock.max_job_lease
    /// (a day by default) is refused for claims and extensions alike.
    #[pg_test]
    fn queue_a_lease_above_max_job_lease_is_refused_with_22023() {
        let id = enqueue("'a'");
        for call in [
            "distlock.consume_task('w', '100 years')".to_string(),
            "distlock.consume_tasks(4, 'w', p_lease => '1 day 1 second')".to_string(),
            "distlock.settle_and_consume_tasks(4, 'w', p_lease => '2 days')".to_string(),
            // Positive by PostgreSQL's 30-day months, 143 years on a calendar.
            "distlock.consume_task('w', '10000 years -3599999 days')".to_string(),
            "distlock.consume_task('w', '2 mons -59 days')".to_string(),
            format!("distlock.extend_task_lease({id}, '100 years', 'w')"),
        ] {
            assert_sqlstate(&call, "22023");
        }
        let processing = "SELECT count(*) FROM distlock.task_queue WHERE status = 'processing'";
        assert_eq!(one::<i64>(processing), Some(0));
        // A day is allowed, and a superuser may allow more.
        run("SELECT * FROM distlock.consume_task('w', '1 day')");
        assert_eq!(one::<i64>(processing), Some(1));
        run("SET LOCAL distlock.max_job_lease = '7d'");
        assert_eq!(one::<bool>(&format!("SELECT distlock.extend_task_lease({id}, '3 days', 'w')")), Some(true));
    }

    #[pg_test(error = "p_lease must not be NULL")]
    fn queue_null_lease_is_an_error() {
        run("SELECT * FROM distlock.consume_task('w', NULL)");
    }

    #[pg_test(error = "p_batch must be between 1 and 1000, got 0")]
    fn queue_batch_of_zero_is_an_error() {
        run("SELECT * FROM distlock.consume_tasks(0)");
    }

    #[pg_test(error = "p_task_name must not be blank, got \" \"")]
    fn queue_blank_name_is_an_error() {
        enqueue("' '");
    }

    #[pg_test(error = "p_task_name must not be NULL")]
    fn queue_null_name_is_an_error() {
        enqueue("NULL");
    }

    #[pg_test(error = "p_payload must not be NULL")]
    fn queue_null_payload_is_an_error() {
        enqueue("'a', NULL");
    }

    #[pg_test(error = "p_max_attempts must be between 1 and 2147483647, got 0")]
    fn queue_zero_max_attempts_is_an_error() {
        enqueue("'a', '{}', now(), 0, 0");
    }

    #[pg_test(error = "p_task_id must not be NULL")]
    fn queue_null_job_id_is_an_error() {
        run("SELECT distlock.fail_task(NULL)");
    }

    #[pg_test(error = "p_worker_id must be at most 1000 bytes, got 1001 bytes")]
    fn queue_overlong_worker_is_an_error() {
        run(&format!("SELECT * FROM distlock.consume_task('{}')", "w".repeat(1001)));
    }

    #[pg_test]
    fn queue_prune_jobs_deletes_only_jobs_finished_before_the_retention() {
        let old_done = enqueue("'prune'");
        let recent_done = enqueue("'prune'");
        run("SELECT distlock.complete_task(task_id, 'w') FROM distlock.consume_tasks(2, 'w')");
        let old_dead = enqueue("'prune', '{}', now(), 0, 1");
        let old_pending = enqueue("'prune'");
        let old_failed = enqueue("'prune'");
        run(&format!(
            "UPDATE distlock.completed_jobs SET completed_at = now() - interval '8 days' WHERE id = {old_done}; \
             UPDATE distlock.task_queue SET status = 'dead', completed_at = now() - interval '8 days', attempts = 1 WHERE id = {old_dead}; \
             UPDATE distlock.completed_jobs SET completed_at = now() - interval '6 days' WHERE id = {recent_done}; \
             UPDATE distlock.task_queue SET created_at = now() - interval '30 days' WHERE id = {old_pending}; \
             UPDATE distlock.task_queue SET status = 'failed', attempts = 1, created_at = now() - interval '30 days' WHERE id = {old_failed}"
        ));
        assert_eq!(one::<i64>("SELECT distlock.prune_jobs()"), Some(2), "default retention is 7 days");
        assert_eq!(
            one::<String>("SELECT string_agg(id::text, ',' ORDER BY id) FROM distlock.jobs WHERE task_name = 'prune'"),
            Some(format!("{recent_done},{old_pending},{old_failed}"))
        );
        assert_eq!(one::<i64>("SELECT distlock.prune_jobs('0 seconds')"), Some(1), "the recent completed job");
    }

    /// Completion moves a job out of the table claims read, whole, and
    /// frees its unique key; completing it again is a refusal, not an error.
    #[pg_test]
    fn queue_completion_moves_the_job_to_completed_jobs() {
        let job = enqueue("'mail', '{\"to\": \"a\"}', now(), 3, 4, p_queue => 'q', p_unique_key => 'k'");
        run("SELECT distlock.fail_task(task_id, 'smtp down', 'w') FROM distlock.consume_task('w')");
        run(&format!("UPDATE distlock.task_queue SET run_after = now() WHERE id = {job}"));
        run("SELECT * FROM distlock.consume_task('w2')");
        assert_eq!(one::<bool>(&format!("SELECT distlock.complete_task({job}, 'w2', 2)")), Some(true));
        assert_eq!(one::<i64>(&format!("SELECT count(*) FROM distlock.task_queue WHERE id = {job}")), Some(0));
        assert_eq!(
            one::<String>(&format!(
                "SELECT concat_ws('/', queue, task_name, payload->>'to', worker_id, attempts, max_attempts, priority, \
                                 last_error, unique_key, completed_at >= started_at) \
                   FROM distlock.completed_jobs WHERE id = {job}"
            )),
            Some("q/mail/a/w2/2/4/3/smtp down/k/t".into())
        );
        assert_eq!(one::<String>(&format!("SELECT status FROM distlock.jobs WHERE id = {job}")), Some("completed".into()));
        assert_eq!(one::<bool>(&format!("SELECT distlock.complete_task({job}, 'w2')")), Some(false));
        assert_eq!(one::<i64>("SELECT completed_last_hour FROM distlock.queues WHERE name = 'q'"), Some(1));
        let again = one::<i64>("SELECT distlock.enqueue_task('mail', p_queue => 'q', p_unique_key => 'k')");
        assert_ne!(again, Some(job), "a completed job frees its key");
    }

    /// A dead job: enqueued with one attempt, claimed and failed.
    fn dead_job(args: &str) -> i64 {
        let job = enqueue(args);
        let claimed = one::<i64>("SELECT task_id FROM distlock.consume_task('w')");
        assert_eq!(claimed, Some(job));
        assert_eq!(one::<bool>(&format!("SELECT distlock.fail_task({job}, 'boom', 'w')")), Some(true));
        assert_eq!(one::<String>(&format!("SELECT status FROM distlock.task_queue WHERE id = {job}")), Some("dead".into()));
        job
    }

    /// The monitor's queue views count the last hour: completions and deaths
    /// per minute, and how long completed jobs waited from runnable to started;
    /// a job completed before the hour is in none of them.
    #[pg_test]
    fn queue_views_count_the_last_hour() {
        let done = enqueue("'mail', '{}', now(), 0, 1, 'q'");
        let old = enqueue("'mail', '{}', now(), 0, 1, 'q'");
        run("SELECT distlock.complete_task(task_id, 'w') FROM distlock.consume_tasks(2, 'w')");
        run(&format!("UPDATE distlock.completed_jobs SET completed_at = now() - interval '2 hours' WHERE id = {old}"));
        run(&format!(
            "UPDATE distlock.completed_jobs SET started_at = created_at + interval '3 seconds' WHERE id = {done}"
        ));
        dead_job("'mail', '{}', now(), 0, 1, 'q'");
        assert_eq!(
            one::<String>("SELECT concat_ws('/', completed_last_hour, dead, pending) FROM distlock.queues WHERE name = 'q'"),
            Some("1/1/0".into())
        );
        assert_eq!(
            one::<String>("SELECT concat_ws('/', sum(completed), sum(died)) FROM distlock.queue_throughput WHERE queue = 'q'"),
            Some("1/1".into())
        );
        assert_eq!(
            one::<String>("SELECT concat_ws('/', jobs, wait_p50, wait_p99, wait_max) FROM distlock.queue_latency WHERE queue = 'q'"),
            Some("1/00:00:03/00:00:03/00:00:03".into())
        );
        // The same wait as a cumulative histogram: below 5 s, not below 2.5 s.
        assert_eq!(
            one::<String>(
                "SELECT string_agg(le || ':' || jobs, ' ' ORDER BY le) FROM distlock.queue_wait_histogram \
                 WHERE queue = 'q' AND le IN (2.5, 5, 'Infinity')"
            ),
            Some("2.5:0 5:1 Infinity:1".into())
        );
        run("UPDATE distlock.completed_jobs SET completed_at = now() - interval '2 hours'");
        run("DELETE FROM distlock.task_queue");
        assert_eq!(one::<i64>("SELECT count(*) FROM distlock.queues WHERE name = 'q'"), Some(0));
        assert_eq!(one::<i64>("SELECT count(*) FROM distlock.queue_latency"), Some(0));
        assert_eq!(one::<i64>("SELECT count(*) FROM distlock.queue_wait_histogram"), Some(0));
    }

    /// Retrying a dead job makes it runnable now with one more attempt; its
    /// last error stays until the attempt settles.
    #[pg_test]
    fn queue_retry_dead_jobs_gives_one_more_attempt() {
        let job = dead_job("'mail', '{}', now(), 0, 1, 'q'");
        let other = dead_job("'mail', '{}', now(), 0, 1, 'other'");
        assert_eq!(one::<i64>("SELECT distlock.retry_dead_jobs('q')"), Some(1));
        assert_eq!(
            one::<String>(&format!(
                "SELECT concat_ws('/', status, attempts, max_attempts, last_error, worker_id IS NULL, run_after <= clock_timestamp()) \
                   FROM distlock.task_queue WHERE id = {job}"
            )),
            Some("pending/1/2/boom/t/t".into())
        );
        assert_eq!(one::<String>(&format!("SELECT status FROM distlock.task_queue WHERE id = {other}")), Some("dead".into()));
        assert_eq!(one::<String>("SELECT task_id || '/' || attempts FROM distlock.consume_task('w')"), Some(format!("{job}/2")));
        assert_eq!(one::<i64>(&format!("SELECT distlock.retry_dead_jobs(p_job_ids => ARRAY[{job}, {other}])")), Some(1));
        assert_eq!(one::<i64>("SELECT distlock.retry_dead_jobs()"), Some(0), "nothing dead is left");
        assert_sqlstate("distlock.retry_dead_jobs(p_job_ids => ARRAY[NULL]::bigint[])", "22004");
    }

    /// A retried job keeps the rule of one unfinished job per key: it stays
    /// dead while another job holds its key, and of two dead jobs of one key
    /// only the newest comes back.
    #[pg_test]
    fn queue_retry_dead_jobs_keeps_one_unfinished_job_per_key() {
        let older = dead_job("'sync', '{}', now(), 0, 1, 'q', 'k'");
        let newer = dead_job("'sync', '{}', now(), 0, 1, 'q', 'k'");
        let live = enqueue("'sync', '{}', now() + interval '1 hour', 0, 1, 'q', 'k'");
        assert_eq!(one::<i64>("SELECT distlock.retry_dead_jobs('q')"), Some(0), "a pending job holds the key");
        run(&format!("DELETE FROM distlock.task_queue WHERE id = {live}"));
        assert_eq!(one::<i64>("SELECT distlock.retry_dead_jobs('q')"), Some(1));
        assert_eq!(
            one::<String>(&format!(
                "SELECT string_agg(id || ':' || status, ',' ORDER BY id) FROM distlock.task_queue WHERE id IN ({older}, {newer})"
            )),
            Some(format!("{older}:dead,{newer}:pending"))
        );
    }

    #[pg_test]
    fn queue_delete_dead_jobs_deletes_only_dead_jobs_of_the_selection() {
        let first = dead_job("'mail', '{}', now(), 0, 1, 'q'");
        let _second = dead_job("'mail', '{}', now(), 0, 1, 'q'");
        let elsewhere = dead_job("'mail', '{}', now(), 0, 1, 'other'");
        let pending = enqueue("'mail', '{}', now() + interval '1 hour', 0, 1, 'q'");
        assert_eq!(one::<i64>(&format!("SELECT distlock.delete_dead_jobs('q', ARRAY[{first}, {pending}])")), Some(1));
        assert_eq!(one::<i64>("SELECT distlock.delete_dead_jobs('q')"), Some(1));
        assert_eq!(
            one::<String>("SELECT string_agg(id::text, ',' ORDER BY id) FROM distlock.task_queue"),
            Some(format!("{elsewhere},{pending}"))
        );
    }

    #[pg_test(error = "p_older_than must not be negative, got -00:00:01")]
    fn queue_prune_jobs_refuses_a_negative_retention() {
        one::<i64>("SELECT distlock.prune_jobs('-1 second')");
    }

    #[pg_test]
    fn queue_a_job_made_dead_at_claim_time_does_not_hide_a_pending_one() {
        let exhausted = enqueue("'a', '{}', now(), 0, 1");
        one::<i64>("SELECT task_id FROM distlock.consume_task('w', '1 millisecond')");
        run("SELECT pg_sleep(0.01)");
        let pending = enqueue("'b'");
        // The expired, exhausted job comes first in the claim and goes dead;
        // the claim still hands out the pending job behind it.
        assert_eq!(one::<i64>("SELECT task_id FROM distlock.consume_task('w2')"), Some(pending));
        assert_eq!(
            one::<String>(&format!("SELECT status::text FROM distlock.jobs WHERE id = {exhausted}")),
            Some("dead".into())
        );
        // The table has no CHECK constraints; the statements keep this one.
        assert_eq!(
            one::<i64>(
                "SELECT count(*) FROM distlock.jobs \
                  WHERE (status = 'processing') <> (lease_expires_at IS NOT NULL) \
                     OR status NOT IN ('pending', 'processing', 'completed', 'failed', 'dead')"
            ),
            Some(0)
        );
    }

    #[pg_test]
    fn queue_complete_tasks_settles_only_what_the_worker_holds() {
        let mine = enqueue("'a'");
        let stale = enqueue("'b'");
        let theirs = enqueue("'c'");
        one::<i64>(&format!("SELECT count(*) FROM distlock.consume_tasks(2, 'w')"));
        one::<i64>("SELECT task_id FROM distlock.consume_task('other')");
        let completed = one::<String>(&format!(
            "SELECT string_agg(id::text, ',' ORDER BY id) \
               FROM distlock.complete_tasks(ARRAY[{mine}, {stale}, {theirs}, 999999], 'w', ARRAY[1, 2, 1, 1]) AS id"
        ));
        // stale names attempt 2 but the worker holds attempt 1; theirs belongs to another worker.
        assert_eq!(completed, Some(mine.to_string()));
        assert_eq!(
            one::<String>(&format!(
                "SELECT string_agg(status, ',' ORDER BY id) FROM distlock.jobs WHERE id IN ({mine}, {stale}, {theirs})"
            )),
            Some("completed,processing,processing".into())
        );
        assert_eq!(
            one::<i64>(&format!("SELECT count(*) FROM distlock.complete_tasks(ARRAY[{stale}], 'w')")),
            Some(1)
        );
    }

    #[pg_test(error = "p_attempts has 1 elements but p_task_ids has 2")]
    fn queue_complete_tasks_with_mismatched_attempts_is_an_error() {
        run("SELECT * FROM distlock.complete_tasks(ARRAY[1, 2], 'w', ARRAY[1])");
    }

    #[pg_test]
    fn queue_wait_returns_no_rows_once_the_wait_is_over() {
        let waited = one::<f64>(
            "SELECT extract(epoch FROM clock_timestamp() - t0)::float8 \
               FROM (SELECT clock_timestamp() AS t0) s, \
                    LATERAL (SELECT count(*) AS n FROM distlock.consume_task('w', p_wait => '150 milliseconds')) c \
              WHERE c.n = 0",
        )
        .expect("no job, one row of timing");
        assert!((0.15..2.0).contains(&waited), "waited {waited} s for a 150 ms wait");
    }

    #[pg_test]
    fn queue_wait_takes_a_delayed_job_when_its_time_comes() {
        let id = enqueue("'later', '{}', clock_timestamp() + interval '300 milliseconds'");
        let (got, waited) = Spi::get_two::<i64, f64>(
            "SELECT c.task_id, extract(epoch FROM clock_timestamp() - s.t0)::float8 \
               FROM (SELECT clock_timestamp() AS t0) s, \
                    LATERAL distlock.consume_task('w', p_wait => '20 seconds') c",
        )
        .expect("row");
        assert_eq!(got, Some(id));
        let waited = waited.expect("time");
        assert!((0.2..5.0).contains(&waited), "the delayed job came after {waited} s");
    }

    #[pg_test(error = "p_wait must not be negative, got -00:00:01")]
    fn queue_negative_wait_is_an_error() {
        run("SELECT * FROM distlock.consume_task('w', p_wait => '-1 second')");
    }
}
