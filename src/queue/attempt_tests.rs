//! Each attempt that ends without success leaves one row in
//! distlock.job_attempts, written by the statement that ended it, and goes
//! with its job.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_sql::{assert_sqlstate, enqueue, one, run};

    /// The attempts recorded for `job`, oldest first, as
    /// `attempt:outcome:worker:error` separated by `|`.
    fn attempts(job: i64) -> Option<String> {
        one::<String>(&format!(
            "SELECT string_agg(attempt || ':' || outcome || ':' || coalesce(worker_id, '-') || ':' || coalesce(error, '-'), \
                               '|' ORDER BY attempt) \
               FROM distlock.job_attempts WHERE job_id = {job}"
        ))
    }

    /// Makes job `job`'s retry runnable now.
    fn due_now(job: i64) {
        run(&format!("UPDATE distlock.task_queue SET run_after = now() - interval '1 second' WHERE id = {job}"));
    }

    #[pg_test]
    fn attempts_fail_task_records_the_attempt_with_its_error() {
        let job = enqueue("'mail', '{}', now(), 0, 5, 'attempts-fail'");
        run("SELECT * FROM distlock.consume_task('w1', p_queues => ARRAY['attempts-fail'])");
        assert_eq!(one::<bool>(&format!("SELECT distlock.fail_task({job}, 'smtp down', 'w1')")), Some(true));
        assert_eq!(attempts(job), Some("1:failed:w1:smtp down".into()));
        assert_eq!(
            one::<bool>(&format!(
                "SELECT a.started_at = q.started_at AND a.ended_at >= a.started_at \
                   FROM distlock.job_attempts a JOIN distlock.task_queue q ON q.id = a.job_id WHERE a.job_id = {job}"
            )),
            Some(true)
        );
        // A refused fail (not this worker's job any more) records nothing.
        assert_eq!(one::<bool>(&format!("SELECT distlock.fail_task({job}, 'again', 'w1')")), Some(false));
        assert_eq!(attempts(job), Some("1:failed:w1:smtp down".into()));
    }

    #[pg_test]
    fn attempts_a_job_failed_to_dead_has_a_row_per_attempt() {
        let job = enqueue("'mail', '{}', now(), 0, 3, 'attempts-dead'");
        for attempt in 1..=3 {
            let claimed = one::<i32>("SELECT attempts FROM distlock.consume_task('w', p_queues => ARRAY['attempts-dead'])");
            assert_eq!(claimed, Some(attempt));
            assert_eq!(
                one::<bool>(&format!("SELECT distlock.fail_task({job}, 'error {attempt}', 'w', {attempt})")),
                Some(true)
            );
            due_now(job);
        }
        assert_eq!(attempts(job), Some("1:failed:w:error 1|2:failed:w:error 2|3:dead:w:error 3".into()));
        assert_eq!(one::<String>(&format!("SELECT status::text FROM distlock.jobs WHERE id = {job}")), Some("dead".into()));
    }

    /// settle_and_consume_tasks' fail arrays record each attempt too.
    #[pg_test]
    fn attempts_failed_in_a_batch_are_recorded() {
        let a = enqueue("'mail', '{}', now(), 0, 5, 'attempts-batch'");
        let b = enqueue("'mail', '{}', now(), 0, 5, 'attempts-batch'");
        run("SELECT * FROM distlock.consume_tasks(2, 'w', p_queues => ARRAY['attempts-batch'])");
        run(&format!(
            "SELECT * FROM distlock.settle_and_consume_tasks(1, 'w', p_failed => ARRAY[{a}, {b}]::bigint[], \
                 p_failed_errors => ARRAY['ea', NULL], p_queues => ARRAY['attempts-batch'])"
        ));
        assert_eq!(attempts(a), Some("1:failed:w:ea".into()));
        assert_eq!(attempts(b), Some("1:failed:w:-".into()));
    }

    /// The record commits with the failure: a savepoint rolled back around
    /// fail_task takes both away.
    #[pg_test]
    fn attempts_a_rolled_back_failure_leaves_no_row() {
        let job = enqueue("'mail', '{}', now(), 0, 5, 'attempts-savepoint'");
        run("SELECT * FROM distlock.consume_task('w', p_queues => ARRAY['attempts-savepoint'])");
        run(&format!(
            "DO $$ BEGIN
               BEGIN
                 PERFORM distlock.fail_task({job}, 'rolled back', 'w');
                 RAISE EXCEPTION 'roll back' USING ERRCODE = 'P0001';
               EXCEPTION WHEN raise_exception THEN NULL;
               END;
             END $$"
        ));
        assert_eq!(attempts(job), None);
        assert_eq!(
            one::<String>(&format!("SELECT status::text FROM distlock.jobs WHERE id = {job}")),
            Some("processing".into())
        );
        assert_eq!(one::<bool>(&format!("SELECT distlock.fail_task({job}, 'kept', 'w')")), Some(true));
        assert_eq!(attempts(job), Some("1:failed:w:kept".into()));
    }

    /// The sweep's takeback of an expired lease records the attempt with the
    /// job's message: expired when put back, dead when no attempt is left.
    #[pg_test]
    fn attempts_an_expired_lease_reaped_is_recorded() {
        let back = enqueue("'mail', '{}', now(), 0, 5, 'attempts-reap'");
        let dies = enqueue("'mail', '{}', now(), 0, 1, 'attempts-reap'");
        run("SELECT * FROM distlock.consume_tasks(2, 'slow', '1 millisecond', p_queues => ARRAY['attempts-reap'])");
        run("SELECT pg_sleep(0.01)");
        run("SELECT count(*) FROM distlock.check_and_recover_timeout_tasks()");
        assert_eq!(attempts(back), Some("1:expired:slow:lease expired, put back (worker slow)".into()));
        assert_eq!(attempts(dies), Some("1:dead:slow:lease expired, no attempt left (worker slow)".into()));
    }

    /// A claim that takes over an expired lease records the attempt that
    /// ran out, once: the late fail of its first consumer is refused and
    /// records nothing, and the new consumer's failure is the next attempt.
    /// Through both claim statements: every queue, and one named queue.
    #[pg_test]
    fn attempts_a_takeover_records_the_attempt_that_ran_out_once() {
        for (queue, queues) in [("attempts-takeover", "NULL"), ("attempts-takeover-q", "ARRAY['attempts-takeover-q']")] {
            let job = enqueue(&format!("'mail', '{{}}', now(), 0, 5, '{queue}'"));
            run(&format!("SELECT * FROM distlock.consume_task('slow', '1 millisecond', p_queues => {queues})"));
            run("SELECT pg_sleep(0.01)");
            assert_eq!(
                one::<i32>(&format!("SELECT attempts FROM distlock.consume_task('fast', p_queues => {queues})")),
                Some(2),
                "{queue}: fast takes the job over"
            );
            assert_eq!(attempts(job), Some("1:expired:slow:lease expired (worker slow)".into()), "{queue}");
            assert_eq!(one::<bool>(&format!("SELECT distlock.fail_task({job}, 'late', 'slow', 1)")), Some(false));
            assert_eq!(attempts(job), Some("1:expired:slow:lease expired (worker slow)".into()), "{queue}");
            assert_eq!(one::<bool>(&format!("SELECT distlock.fail_task({job}, 'e2', 'fast', 2)")), Some(true));
            assert_eq!(
                attempts(job),
                Some("1:expired:slow:lease expired (worker slow)|2:failed:fast:e2".into()),
                "{queue}"
            );
        }
    }

    /// A takeover of a job with no attempt left makes it dead, recorded so.
    #[pg_test]
    fn attempts_a_takeover_with_no_attempt_left_records_the_death() {
        let job = enqueue("'mail', '{}', now(), 0, 1, 'attempts-takeover-dies'");
        let other = enqueue("'mail', '{}', now() + interval '1 hour', 0, 1, 'attempts-takeover-dies'");
        run("SELECT * FROM distlock.consume_task('slow', '1 millisecond', p_queues => ARRAY['attempts-takeover-dies'])");
        run("SELECT pg_sleep(0.01)");
        run("SELECT * FROM distlock.consume_task('fast', p_queues => ARRAY['attempts-takeover-dies'])");
        assert_eq!(attempts(job), Some("1:dead:slow:lease expired, no attempt left (worker slow)".into()));
        assert_eq!(one::<String>(&format!("SELECT status::text FROM distlock.jobs WHERE id = {job}")), Some("dead".into()));
        assert_eq!(attempts(other), None, "a claim without a takeover records nothing");
    }

    #[pg_test]
    fn attempts_a_requeued_job_records_the_attempt_taken_back() {
        let job = enqueue("'mail', '{}', now(), 0, 5, 'attempts-requeue'");
        run("SELECT * FROM distlock.consume_task('hung', p_queues => ARRAY['attempts-requeue'])");
        assert_eq!(one::<i64>(&format!("SELECT distlock.requeue_jobs(p_job_ids => ARRAY[{job}]::bigint[])")), Some(1));
        assert_eq!(attempts(job), Some("1:requeued:hung:returned to the queue by an admin (worker hung)".into()));
    }

    /// prune_jobs, delete_dead_jobs and purge_queue delete a job's attempts
    /// with it, and leave other jobs' alone.
    #[pg_test]
    fn attempts_go_with_their_job() {
        let fail_once = |queue: &str, max_attempts: i32| -> i64 {
            let job = enqueue(&format!("'mail', '{{}}', now(), 0, {max_attempts}, '{queue}'"));
            run(&format!("SELECT distlock.fail_task(task_id, 'e', 'w') FROM distlock.consume_task('w', p_queues => ARRAY['{queue}'])"));
            job
        };
        // Completed after a failure, then pruned.
        let completed = fail_once("attempts-prune", 5);
        due_now(completed);
        run("SELECT distlock.complete_task(task_id, 'w') FROM distlock.consume_task('w', p_queues => ARRAY['attempts-prune'])");
        run(&format!("UPDATE distlock.completed_jobs SET completed_at = now() - interval '8 days' WHERE id = {completed}"));
        // Dead, then pruned.
        let pruned_dead = fail_once("attempts-prune", 1);
        run(&format!("UPDATE distlock.task_queue SET completed_at = now() - interval '8 days' WHERE id = {pruned_dead}"));
        // Dead, then deleted.
        let deleted = fail_once("attempts-delete", 1);
        // Failed, then purged.
        let purged = fail_once("attempts-purge", 5);
        // Failed, and kept.
        let kept = fail_once("attempts-kept", 5);
        for job in [completed, pruned_dead, deleted, purged, kept] {
            assert_eq!(one::<i64>(&format!("SELECT count(*) FROM distlock.job_attempts WHERE job_id = {job}")), Some(1));
        }
        assert!(one::<i64>("SELECT distlock.prune_jobs()").is_some_and(|n| n >= 2));
        assert_eq!(one::<i64>(&format!("SELECT distlock.delete_dead_jobs('attempts-delete', ARRAY[{deleted}]::bigint[])")), Some(1));
        assert_eq!(one::<i64>("SELECT distlock.purge_queue('attempts-purge')"), Some(1));
        for job in [completed, pruned_dead, deleted, purged] {
            assert_eq!(attempts(job), None, "job {job}'s attempts");
        }
        assert_eq!(attempts(kept), Some("1:failed:w:e".into()));
    }

    /// Errors are the workers' data: admins read them, consumers and
    /// monitors do not.
    #[pg_test]
    fn attempts_are_read_by_admins_only() {
        run("CREATE ROLE attempts_consumer; SELECT distlock.grant_capability('attempts_consumer', 'consumer'); \
             CREATE ROLE attempts_monitor; SELECT distlock.grant_capability('attempts_monitor', 'monitor'); \
             CREATE ROLE attempts_admin; SELECT distlock.grant_capability('attempts_admin', 'admin')");
        for role in ["attempts_consumer", "attempts_monitor"] {
            run(&format!("SET LOCAL ROLE {role}"));
            assert_sqlstate("(SELECT count(*) FROM distlock.job_attempts)", "42501");
            run("RESET ROLE");
        }
        run("SET LOCAL ROLE attempts_admin");
        assert!(one::<i64>("SELECT count(*) FROM distlock.job_attempts").is_some());
        run("RESET ROLE");
        assert_eq!(
            one::<bool>("SELECT has_table_privilege('attempts_admin', 'distlock.job_attempts', 'INSERT') \
                             OR has_table_privilege('attempts_admin', 'distlock.job_attempts', 'DELETE')"),
            Some(false),
            "insert-only, and only through the queue functions"
        );
    }
}
