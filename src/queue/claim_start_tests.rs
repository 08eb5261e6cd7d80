//! A claim starts after the last job its backend claimed (claim_start.rs):
//! it still takes higher priorities first, misses no runnable job, and
//! leaves a job that became runnable behind that place waiting no longer
//! than HEAD_EVERY_US.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_sql::{clock_seconds, enqueue, one, run};

    /// consume_task along a route: every queue, or queue 'q' by name (each
    /// reads its own statement and index).
    fn consume(route: &str) -> Option<i64> {
        one::<i64>(&format!("SELECT (SELECT task_id FROM distlock.consume_task('w', p_queues => {route}))"))
    }

    const ROUTES: [(&str, &str); 2] = [("NULL", "'default'"), ("ARRAY['q']", "'q'")];

    #[pg_test]
    fn queue_a_claim_after_the_last_job_still_takes_higher_priorities_and_misses_nothing() {
        for (route, queue) in ROUTES {
            let first = enqueue(&format!("'a', '{{}}', now(), 0, 5, {queue}"));
            assert_eq!(consume(route), Some(first), "{route}");
            // Runnable behind where the next claim starts, and nothing after it.
            let behind = enqueue(&format!("'b', '{{}}', now() - interval '1 hour', 0, 5, {queue}"));
            assert_eq!(consume(route), Some(behind), "{route}");
            let later = enqueue(&format!("'c', '{{}}', now(), 0, 5, {queue}"));
            let urgent = enqueue(&format!("'d', '{{}}', now(), 5, 5, {queue}"));
            let least = enqueue(&format!("'e', '{{}}', now() - interval '2 hours', -1, 5, {queue}"));
            assert_eq!(consume(route), Some(urgent), "{route}");
            assert_eq!(consume(route), Some(later), "{route}");
            assert_eq!(consume(route), Some(least), "{route}");
            assert_eq!(consume(route), None, "{route}");
        }
    }

    /// While jobs after the start are runnable, a job behind it is passed
    /// over (that is what spares the claim the index entries of the jobs
    /// claimed before), but for a tenth of a second at most.
    #[pg_test]
    fn queue_a_job_behind_where_claims_start_waits_a_tenth_of_a_second_at_most() {
        for (route, queue) in ROUTES {
            let first = enqueue(&format!("'a', '{{}}', now(), 0, 5, {queue}"));
            let began = clock_seconds();
            assert_eq!(consume(route), Some(first), "{route}");
            let behind = enqueue(&format!("'b', '{{}}', now() - interval '1 hour', 0, 5, {queue}"));
            let after = enqueue(&format!("'c', '{{}}', now(), 0, 5, {queue}"));
            let taken = consume(route);
            let elapsed = clock_seconds() - began;
            if elapsed < 0.1 {
                assert_eq!(taken, Some(after), "{route}");
                run("SELECT pg_sleep(0.1)");
                assert_eq!(consume(route), Some(behind), "{route}");
            } else {
                // Too slow a machine to tell: the start had expired anyway.
                assert_eq!(taken, Some(behind), "{route}");
            }
        }
    }

    /// With the runnable log, reading from the head is a net whose cost
    /// grows while a held snapshot keeps the claimed jobs' entries at the
    /// head: it is spaced by the entries it stepped over, up to a minute.
    /// Without the log it is how a job behind the start is found, every
    /// tenth of a second.
    #[pg_test]
    fn queue_reads_from_the_head_are_spaced_by_what_they_stepped_over_up_to_a_minute_only_with_the_log() {
        use crate::queue::claim_start::head_every;
        assert_eq!(head_every(true, 2_000), 1_000_000, "a read over 2,000 entries: once a second");
        assert_eq!(head_every(true, 150_000), 30_000_000, "150,000 entries: once in 30 s");
        assert_eq!(head_every(true, 5_000_000), 60_000_000, "however many: at least once a minute");
        assert_eq!(head_every(true, i64::MAX), 60_000_000);
        assert_eq!(head_every(false, 150_000), 100_000, "no log: every tenth of a second whatever it costs");
    }

    /// A read from the head counts the index entries it stepped over
    /// (here those of 5,000 jobs this transaction claimed, in five calls
    /// of 1,000, which no scan can mark dead while it runs), not its
    /// time nor the jobs it returned; a claim of one job after it, from the
    /// place it reached, changes nothing of that (the second review of
    /// issue 46 found a per-job estimate reset by such a claim).
    #[pg_test]
    fn queue_a_read_from_the_head_counts_the_entries_it_stepped_over() {
        use crate::queue::claim_start::{forget_starts, last_head_read};
        crate::test_sql::queue_plans_to_myself();
        run("SELECT distlock.enqueue_tasks('job', (SELECT array_agg('{}'::jsonb) FROM generate_series(1, 5000)), p_queue => 'stepped')");
        assert_eq!(
            one::<i64>("SELECT count(*) FROM generate_series(1, 5) g, distlock.consume_tasks(1000 + g * 0, 'w', p_queues => ARRAY['stepped'])"),
            Some(5000)
        );
        let role = crate::access::caller();
        for (route, queue) in [("NULL", None), ("ARRAY['stepped']", Some(crate::text::Text::from("stepped")))] {
            forget_starts();
            enqueue("'a', '{}', now(), 0, 5, 'stepped'");
            let began = clock_seconds();
            assert!(consume(route).is_some(), "{route}: the job after the claimed ones");
            let read = last_head_read(queue.as_ref(), role).expect("a start after the read from the head");
            let stepped_over = read.stepped_over;
            assert!(stepped_over.unseen >= 5_000, "{route}: {stepped_over:?}");
            assert!(stepped_over.passed < 1_000, "{route}: {stepped_over:?}");
            enqueue("'b', '{}', now(), 0, 5, 'stepped'");
            assert!(consume(route).is_some(), "{route}: a claim of one job");
            // Without the runnable log (these tests run without shared
            // memory) a claim reads from the head again after 0.1 s.
            if clock_seconds() - began < 0.1 {
                assert_eq!(last_head_read(queue.as_ref(), role), Some(read), "{route}: the read from the head still counts");
            }
        }
    }

    /// The live jobs of a paused queue that a read from the head of every
    /// queue passes over count as rows it saw and passed over, not as
    /// versions it could not see: they stay, and so does their cost,
    /// whatever vacuum does (the fourth review of issue 46).
    #[pg_test]
    fn queue_a_read_from_the_head_tells_the_rows_it_passed_over_from_the_versions_it_could_not_see() {
        use crate::queue::claim_start::{forget_starts, last_head_read};
        crate::test_sql::queue_plans_to_myself();
        run("SELECT distlock.pause_queue('held-back')");
        run("SELECT distlock.enqueue_tasks('job', (SELECT array_agg('{}'::jsonb) FROM generate_series(1, 3000)),
                                           now() - interval '1 day', p_queue => 'held-back')");
        forget_starts();
        enqueue("'a', '{}', now(), 0, 5, 'open'");
        assert!(consume("NULL").is_some(), "the job of the open queue, after the paused queue's");
        let stepped_over = last_head_read(None, crate::access::caller()).expect("a start after the read from the head").stepped_over;
        // The unseen ones are the dead entries earlier tests left.
        assert!((3_000..4_000).contains(&stepped_over.passed), "{stepped_over:?}");
    }

    /// Jobs a rolled-back claim took are runnable again behind where the
    /// backend's claims would start: it starts from the head again.
    #[pg_test]
    fn queue_jobs_of_a_rolled_back_claim_come_first_again() {
        let first = enqueue("'a'");
        let second = enqueue("'b'");
        let third = enqueue("'c'");
        run("DO $$ BEGIN
               PERFORM distlock.consume_tasks(2, 'w');
               RAISE EXCEPTION 'roll the claim back';
             EXCEPTION WHEN raise_exception THEN NULL;
             END $$");
        assert_eq!(one::<i64>("SELECT task_id FROM distlock.consume_task('w')"), Some(first));
        assert_eq!(one::<i64>("SELECT task_id FROM distlock.consume_task('w')"), Some(second));
        assert_eq!(one::<i64>("SELECT task_id FROM distlock.consume_task('w')"), Some(third));
    }
}
