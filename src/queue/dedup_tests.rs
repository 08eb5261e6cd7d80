//! Dedup windows (issue 49, item 6): `enqueue_task(..., p_unique_for)`.
//! tests/cluster/queue_dedup.rs races producers against a completion.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_sql::{assert_sqlstate, enqueue, one, run};

    const KEYED: &str = "'sync', p_queue => 'dedup-q', p_unique_key => 'account:7', p_unique_for => '1 hour'";

    fn jobs_of_key() -> Option<i64> {
        one::<i64>("SELECT count(*) FROM distlock.jobs WHERE queue = 'dedup-q' AND unique_key = 'account:7'")
    }

    fn claim_and_complete(job: i64) {
        assert_eq!(one::<i64>("SELECT task_id FROM distlock.consume_task('w', p_queues => ARRAY['dedup-q'])"), Some(job));
        assert_eq!(one::<bool>(&format!("SELECT distlock.complete_task({job}, 'w')")), Some(true));
    }

    #[pg_test]
    fn dedup_a_job_completed_within_the_window_holds_its_key() {
        let first = enqueue(KEYED);
        assert_eq!(enqueue(KEYED), first, "unfinished: the holder, as without a window");
        claim_and_complete(first);
        assert_eq!(enqueue(KEYED), first, "completed within the window: still the holder");
        assert_eq!(jobs_of_key(), Some(1));
        // Without a window a completed job frees its key, as before.
        let plain = enqueue("'sync', p_queue => 'dedup-q', p_unique_key => 'account:7'");
        assert_ne!(plain, first);
        assert_eq!(enqueue(KEYED), plain, "an unfinished holder comes first");
        claim_and_complete(plain);
        // The newest completion answers; once it is older than the window, the key is free.
        assert_eq!(enqueue(KEYED), plain);
        run("UPDATE distlock.completed_jobs SET completed_at = now() - interval '61 minutes' WHERE queue = 'dedup-q'");
        let fresh = enqueue(KEYED);
        assert!(fresh != first && fresh != plain);
        assert_eq!(jobs_of_key(), Some(3));
        // A window is the caller's: a shorter one lets a recent completion go.
        claim_and_complete(fresh);
        run(&format!("UPDATE distlock.completed_jobs SET completed_at = now() - interval '10 minutes' WHERE id = {fresh}"));
        assert_eq!(enqueue(KEYED), fresh);
        let short = enqueue("'sync', p_queue => 'dedup-q', p_unique_key => 'account:7', p_unique_for => '5 minutes'");
        assert_ne!(short, fresh);
        // Per queue: the same key in another queue is another job.
        assert_ne!(enqueue("'sync', p_queue => 'dedup-other', p_unique_key => 'account:7', p_unique_for => '1 hour'"), short);
    }

    /// A dead job does not hold its key (it did not do the work); a job
    /// the window answered with queued nothing, and left no row behind.
    #[pg_test]
    fn dedup_dead_jobs_do_not_hold_the_key_and_a_merged_call_leaves_nothing() {
        let dies = enqueue("'sync', p_queue => 'dedup-q', p_unique_key => 'account:7', p_max_attempts => 1");
        assert_eq!(one::<i64>("SELECT task_id FROM distlock.consume_task('w', p_queues => ARRAY['dedup-q'])"), Some(dies));
        assert_eq!(one::<bool>(&format!("SELECT distlock.fail_task({dies}, 'boom', 'w')")), Some(true));
        assert_eq!(one::<String>(&format!("SELECT status FROM distlock.jobs WHERE id = {dies}")), Some("dead".into()));
        let after_dead = enqueue(KEYED);
        assert_ne!(after_dead, dies);
        claim_and_complete(after_dead);
        let pending_before = one::<i64>("SELECT count(*) FROM distlock.task_queue WHERE queue = 'dedup-q' AND status = 'pending'");
        assert_eq!(enqueue(KEYED), after_dead);
        assert_eq!(
            one::<i64>("SELECT count(*) FROM distlock.task_queue WHERE queue = 'dedup-q' AND status = 'pending'"),
            pending_before
        );
    }

    #[pg_test]
    fn dedup_refuses_a_window_without_key_or_length_or_outside_read_committed() {
        assert_sqlstate("distlock.enqueue_task('sync', p_unique_for => '1 hour')", "22023");
        assert_sqlstate("distlock.enqueue_task('sync', p_unique_key => 'k', p_unique_for => '0 seconds')", "22023");
        assert_sqlstate("distlock.enqueue_task('sync', p_unique_key => 'k', p_unique_for => '-1 hour')", "22023");
        assert_sqlstate("distlock.enqueue_task('sync', p_unique_key => 'k', p_unique_for => '1 day -1 hour')", "22023");
        assert_eq!(one::<i64>("SELECT count(*) FROM distlock.jobs WHERE task_name = 'sync'"), Some(0));
    }

    /// A completed holder the caller could not see (its name or its group
    /// outside the caller's producer scope) is passed over: the caller's
    /// job is queued, and it learns nothing of the other (review helper-90:
    /// 23505 for a window that reached back to it told when it completed).
    #[pg_test]
    fn dedup_a_completed_holder_outside_the_scope_is_not_answered() {
        let hidden = enqueue("'a.sync', p_queue => 'a.q', p_unique_key => 'k', p_group => 'secret-b'");
        assert_eq!(one::<i64>("SELECT task_id FROM distlock.consume_task('w', p_queues => ARRAY['a.q'])"), Some(hidden));
        assert_eq!(one::<bool>(&format!("SELECT distlock.complete_task({hidden}, 'w')")), Some(true));
        run("CREATE ROLE dedup_producer; SELECT distlock.grant_capability('dedup_producer', 'producer', 'a.'); \
             SET LOCAL ROLE dedup_producer");
        let own = enqueue("'a.sync', p_queue => 'a.q', p_unique_key => 'k', p_group => 'a.g', p_unique_for => '1 hour'");
        run("RESET ROLE");
        assert_ne!(own, hidden);
        assert_eq!(one::<String>(&format!("SELECT status || ':' || group_key FROM distlock.jobs WHERE id = {own}")), Some("pending:a.g".into()));
    }
}
