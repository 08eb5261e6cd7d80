//! Review of the attempt history (branch attempt-history): breaks found by
//! attacking it, each a test that fails until it is fixed.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_sql::{enqueue, one, run};

    /// This backend's locks on distlock.job_attempts, held until the test's
    /// transaction ends.
    fn history_locks() -> Option<i64> {
        one::<i64>(
            "SELECT count(*) FROM pg_locks \
              WHERE pid = pg_backend_pid() AND locktype = 'relation' \
                AND relation = 'distlock.job_attempts'::regclass",
        )
    }

    /// The hot path: a claim that takes over no expired lease records
    /// nothing, yet both claim statements carry the INSERT into
    /// distlock.job_attempts, so every claim opens the table and its
    /// primary key (RowExclusiveLock), fires its library_guard trigger and
    /// sets up ON CONFLICT. Any ShareLock or stronger on the history table
    /// (a CREATE INDEX on ended_at for the console, VACUUM FULL after a
    /// prune, CLUSTER, LOCK) then stops every consumer, and
    /// lock_claim_tables (claim.rs) does not take this lock before the
    /// claim's HeldSnapshot, so a claim can wait for it between its two
    /// snapshots, which that function exists to prevent. A claim with no
    /// takeover should not touch the history at all.
    #[pg_test]
    fn review_attempts_a_claim_without_takeover_does_not_touch_the_history() {
        enqueue("'mail', '{}', now(), 0, 5, 'review-attempts-hot'");
        // queue_consume_queue.sql (a named queue)
        assert_eq!(
            one::<i32>("SELECT attempts FROM distlock.consume_task('w', p_queues => ARRAY['review-attempts-hot'])"),
            Some(1)
        );
        assert_eq!(history_locks(), Some(0), "a named queue's claim, with no lease to take over, locked job_attempts");
    }

    #[pg_test]
    fn review_attempts_an_every_queue_claim_without_takeover_does_not_touch_the_history() {
        enqueue("'mail', '{}', now(), 0, 5, 'review-attempts-hot-every'");
        // queue_consume.sql (every queue)
        assert_eq!(one::<i32>("SELECT attempts FROM distlock.consume_task('w')"), Some(1));
        assert_eq!(history_locks(), Some(0), "an every-queue claim, with no lease to take over, locked job_attempts");
    }

    /// A hostile (or careless) consumer's error is stored in full once per
    /// attempt and kept for the job's whole life (max_attempts may be
    /// 2147483647, and prune_jobs removes attempts only with their job):
    /// last_error was overwritten, the history accumulates. Every other
    /// stored input is bounded (names: 1000 bytes); the recorded error is
    /// not. Here one 4 MB error is stored as 4 MB.
    #[pg_test]
    fn review_attempts_a_recorded_error_is_bounded() {
        let job = enqueue("'mail', '{}', now(), 0, 5, 'review-attempts-big'");
        run("SELECT * FROM distlock.consume_task('w', p_queues => ARRAY['review-attempts-big'])");
        assert_eq!(
            one::<bool>(&format!("SELECT distlock.fail_task({job}, repeat('x', 4 * 1024 * 1024), 'w')")),
            Some(true)
        );
        let stored = one::<i32>(&format!("SELECT octet_length(error) FROM distlock.job_attempts WHERE job_id = {job}"));
        assert!(stored.is_some(), "the attempt is recorded");
        assert!(
            stored.is_some_and(|bytes| bytes <= 64 * 1024),
            "job {job}'s recorded error is {stored:?} bytes"
        );
    }
}
