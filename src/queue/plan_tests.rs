//! The plans of the queue's frequent statements as a backend keeps them
//! (generic plans, made once), on a queue whose statistics were taken at a
//! quiet moment: each reads the index meant for it, so that its cost does
//! not grow with the jobs it does not touch.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_sql::run;

    /// The generic plan of statement `sql` (whose first line names its
    /// parameter types) for the arguments `args`, as EXPLAIN prints it.
    fn generic_plan(sql: &str, args: &str) -> String {
        let types = sql.lines().next().and_then(|line| line.strip_prefix("-- params: ")).expect("a params line");
        run(&format!("SET LOCAL plan_cache_mode = force_generic_plan; PREPARE plan_test({types}) AS {sql}"));
        let plan = Spi::connect(|client| {
            client
                .select(&format!("EXPLAIN EXECUTE plan_test({args})"), None, &[])
                .map(|rows| rows.filter_map(|row| row.get::<String>(1).ok().flatten()).collect::<Vec<_>>().join("\n"))
        })
        .expect("EXPLAIN");
        run("DEALLOCATE plan_test");
        plan
    }

    /// The tests of this file one at a time (and not beside a test that
    /// grows the queue by thousands of rows): ANALYZE writes the table's
    /// size to pg_class in place, outside the transaction, so that one
    /// test's statistics became another's, running beside it, and the plan
    /// it checked changed (seen on PostgreSQL 18 in CI).
    fn one_plan_test_at_a_time() {
        crate::test_sql::queue_plans_to_myself();
    }

    /// 5,000 runnable jobs in ten queues, analyzed while none was
    /// processing, then 200 of them claimed: the statistics call the lease
    /// index empty. Ten queues, as a queue is one of several in use: with
    /// one, the index of every queue serves a claim from that queue as well
    /// as the queue's own, and was chosen whenever the table's bloat from
    /// earlier tests made it look smaller.
    fn queue_analyzed_while_quiet() {
        one_plan_test_at_a_time();
        run("INSERT INTO distlock.task_queue (task_name, payload, queue)
               SELECT 'plan-test', pg_catalog.jsonb_build_object('n', g), 'plan-' || g % 10
                 FROM generate_series(1, 5000) g;
             ANALYZE distlock.task_queue;
             SELECT count(*) FROM distlock.consume_tasks(200, 'plan-worker')");
    }

    /// A settle finds its jobs through the primary key. Read through the
    /// lease index, each settle stepped over every processing job (and every
    /// dead entry of one) whenever the statistics called that index empty.
    #[pg_test]
    fn queue_settles_read_their_jobs_by_primary_key() {
        queue_analyzed_while_quiet();
        let settles = [
            (include_str!("../../sql/queries/queue_complete.sql"), "1, 'plan-worker', NULL, 1"),
            (include_str!("../../sql/queries/queue_fail.sql"), "1, 'plan-worker', 'e', 1"),
            (include_str!("../../sql/queries/queue_extend.sql"), "1, 'plan-worker', '1 minute', 1"),
            (include_str!("../../sql/queries/queue_complete_many.sql"), "ARRAY[1, 2], 'plan-worker', ARRAY[1, 1]"),
            (
                include_str!("../../sql/queries/queue_fail_many.sql"),
                "ARRAY[1, 2], 'plan-worker', ARRAY[1, 1], ARRAY['e', 'e']",
            ),
        ];
        for (sql, args) in settles {
            let plan = generic_plan(sql, args);
            assert!(
                plan.contains("task_queue_pkey") && !plan.contains("task_queue_lease_idx"),
                "{}\n{plan}",
                sql.lines().nth(1).unwrap_or_default()
            );
        }
    }

    /// A consumer about to wait reads when the next job scheduled for later
    /// comes due from the due index, not by stepping over every runnable job.
    #[pg_test]
    fn queue_next_due_reads_the_due_index() {
        queue_analyzed_while_quiet();
        let plan = generic_plan(
            include_str!("../../sql/queries/queue_next_due.sql"),
            "now(), now() + interval '1 second', NULL, ARRAY['default'], 1",
        );
        assert!(plan.contains("task_queue_due_idx"), "{plan}");
        // Leases up to the horizon only: the walk of the lease index stops
        // there, not at the first live lease past every dead version before it.
        assert!(plan.contains("Index Cond: (lease_expires_at <= $2)"), "{plan}");
    }

    /// A claim that starts after the last job its backend claimed goes
    /// there by the index (claim_start.rs), not by stepping over what lies
    /// before: the place is an index condition of the claim's own index.
    /// Planned as claim.rs plans it, under plans::ordered_scans: left to the
    /// estimates, the scope filter's (`^@ ANY`, a hundredth) made a bitmap
    /// scan and a sort of one queue's 56 jobs look cheaper.
    #[pg_test]
    fn queue_claims_start_where_they_are_told_by_the_index() {
        queue_analyzed_while_quiet();
        let _ordered = crate::plans::ordered_scans();
        let claims = [
            (
                include_str!("../../sql/queries/queue_consume.sql"),
                "1, 'w', '5 minutes', 10, now(), NULL, 0, now(), 1",
                "task_queue_runnable_idx",
            ),
            (
                include_str!("../../sql/queries/queue_consume_queue.sql"),
                "1, 'w', '5 minutes', 10, now(), NULL, 'default', false, 0, now(), 1",
                "task_queue_queue_runnable_idx",
            ),
        ];
        for (sql, args, index) in claims {
            let plan = generic_plan(sql, args);
            let scan = plan
                .lines()
                .skip_while(|line| !line.contains("CTE runnable_from_start"))
                .skip_while(|line| !line.contains(&format!("Index Scan using {index} ")))
                .take(2)
                .collect::<Vec<_>>()
                .join("\n");
            assert!(scan.contains("ROW(run_after, id) >= ROW("), "{plan}");
        }
    }

    /// A claim reads the runnable jobs along its index in order however the
    /// planner prices that (plans::ordered_scans): with costs under which
    /// collecting and sorting every runnable job looks cheaper, as the dead
    /// rows of a held snapshot made it look, the plan a claim is made with
    /// still reads its index in order, and the caller's settings come back.
    #[pg_test]
    fn queue_claims_read_their_index_in_order_whatever_the_estimates() {
        one_plan_test_at_a_time();
        // A random page this dear makes a sort look cheaper whatever the
        // statistics.
        run("SET LOCAL random_page_cost = 1000");
        let claims = [
            (include_str!("../../sql/queries/queue_consume.sql"), "64, 'w', '5 minutes', 10, now(), NULL, 0, now(), 1"),
            (
                include_str!("../../sql/queries/queue_consume_queue.sql"),
                "64, 'w', '5 minutes', 10, now(), NULL, 'default', false, 0, now(), 1",
            ),
        ];
        for (sql, args) in claims {
            let unguarded = generic_plan(sql, args);
            assert!(unguarded.contains("Sort"), "these costs make sorting look cheaper:\n{unguarded}");
            let guarded = {
                let _ordered = crate::plans::ordered_scans();
                generic_plan(sql, args)
            };
            assert!(!guarded.contains("Sort") && !guarded.contains("Bitmap"), "{guarded}");
            assert!(unsafe { pg_sys::enable_sort && pg_sys::enable_bitmapscan }, "the settings restored");
        }
    }
    /// The count of the jobs a read from the head passed over for good
    /// (passed_for_good.rs) reads the claim's index in its order from the
    /// head, the place where the claim stopped an index condition, whatever
    /// the estimates.
    #[pg_test]
    fn queue_passed_for_good_reads_the_claims_range_of_its_index() {
        queue_analyzed_while_quiet();
        let counts = [
            (
                include_str!("../../sql/queries/queue_passed_for_good.sql"),
                "100, now(), ARRAY['plan-'], 0, now(), 1",
                "task_queue_runnable_idx",
            ),
            (
                include_str!("../../sql/queries/queue_passed_for_good_in_queue.sql"),
                "100, now(), ARRAY['plan-'], 0, now(), 1, 'plan-1'",
                "task_queue_queue_runnable_idx",
            ),
        ];
        let _ordered = crate::plans::ordered_scans();
        for (sql, args, index) in counts {
            let plan = generic_plan(sql, args);
            assert!(!plan.contains("Seq Scan on task_queue") && !plan.contains("Sort") && !plan.contains("Bitmap"), "{plan}");
            assert_eq!(plan.matches(&format!("Index Scan using {index} ")).count(), 2, "{plan}");
            assert!(plan.contains("ROW(run_after, id) <= ROW("), "{plan}");
        }
    }

    /// A waiting consumer's statements set up no function scan per
    /// execution: the executor sets one up for every `EXISTS (SELECT FROM
    /// unnest(...))`, even when its array is NULL, and the view
    /// pg_prepared_xacts joins two catalogs besides; together they were
    /// a sixth of a woken consumer's instructions
    /// (benches/queue_wake_instructions.sh).
    #[pg_test]
    fn queue_waiting_looks_set_up_no_function_scan_per_filter() {
        queue_analyzed_while_quiet();
        let statements = [
            (include_str!("../../sql/queries/queue_consume.sql"), "1, 'w', '5 minutes', 10, now(), ARRAY['plan-'], 0, now(), 1"),
            (
                include_str!("../../sql/queries/queue_consume_queue.sql"),
                "1, 'w', '5 minutes', 10, now(), ARRAY['plan-'], 'default', false, 0, now(), 1",
            ),
            (
                include_str!("../../sql/queries/queue_next_due.sql"),
                "now(), now() + interval '1 second', ARRAY['plan-'], ARRAY['default'], 1",
            ),
            (include_str!("../../sql/queries/queue_passed_for_good.sql"), "100, now(), ARRAY['plan-'], 0, now(), 1"),
            (
                include_str!("../../sql/queries/queue_passed_for_good_in_queue.sql"),
                "100, now(), ARRAY['plan-'], 0, now(), 1, 'plan-1'",
            ),
            (include_str!("../../sql/queries/queue_prepared_here.sql"), "1"),
        ];
        for (sql, args) in statements {
            let plan = generic_plan(sql, args);
            let scans = plan.matches("Function Scan").count();
            // The prepared-transaction test reads pg_prepared_xact(): one scan, once.
            let allowed = usize::from(sql.contains("pg_prepared_xact()"));
            assert!(scans == allowed && !plan.contains("pg_authid"), "{}\n{plan}", sql.lines().nth(1).unwrap_or_default());
        }
    }
}
