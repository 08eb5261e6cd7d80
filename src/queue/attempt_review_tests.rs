//! Review of the attempt history (branch attempt-history): breaks found by
//! attacking it, each a test that fails until it is fixed.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_sql::{enqueue, one, run};

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
            stored == Some(16384),
            "job {job}'s recorded error is {stored:?} bytes"
        );
    }
}
