//! Single-session tests of the task API. Contention, crashes and restarts
//! are covered by tests/cluster, which drives many real connections.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_sql::{one, run};

    /// Inserts a task due now and returns its id.
    fn due_task(name: &str, cron: Option<&str>) -> i32 {
        let cron = cron.map_or("NULL".to_string(), |c| format!("'{c}'"));
        one::<i32>(&format!(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at) \
             VALUES ('{name}', 'test', {cron}, now() - interval '1 second') RETURNING id"
        ))
        .expect("id")
    }

    /// Inserts a task due now with a fixed id (ids from the serial differ between runs).
    fn due_task_with_id(id: i32) -> i32 {
        run(&format!(
            "INSERT INTO distlock.scheduled_tasks (id, task_name, task_type, next_run_at) \
             VALUES ({id}, 'fixed{id}', 'test', now() - interval '1 second')"
        ));
        id
    }

    fn claim(id: i32, worker: &str) -> bool {
        one::<bool>(&format!("SELECT distlock.try_acquire_task_lock({id}, '{worker}')")).expect("bool")
    }

    fn count(sql: &str) -> i64 {
        one::<i64>(&format!("SELECT count(*) FROM ({sql}) q")).expect("count")
    }

    /// Releases the claim as completed in a subtransaction that rolls back.
    fn release_then_roll_back(id: i32, worker: &str) {
        run(&format!(
            "DO $$ BEGIN \
               BEGIN PERFORM distlock.release_task_lock({id}, '{worker}', 'completed'); RAISE EXCEPTION 'boom'; \
               EXCEPTION WHEN raise_exception THEN NULL; END; \
             END $$"
        ));
    }

    #[pg_test]
    fn tasks_claim_logs_one_running_row_with_a_token() {
        let id = due_task("t1", None);
        assert!(claim(id, "w1"));
        assert_eq!(
            count(&format!(
                "SELECT 1 FROM distlock.task_execution_log WHERE task_id = {id} AND status = 'running' \
                 AND worker_id = 'w1' AND holder_pid = pg_backend_pid() AND attempt = 1 \
                 AND lock_id = ({id}::bigint << 32) | (fencing_token & 4294967295) \
                 AND holder_backend_start = (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()) \
                 AND fencing_token = (SELECT current_token FROM distlock.scheduled_tasks WHERE id = {id})"
            )),
            1
        );
        // Re-entrant advisory locks must not let the holder log a second run.
        assert!(!claim(id, "w1"));
        assert!(!claim(id, "w2"));
        assert_eq!(count(&format!("SELECT 1 FROM distlock.task_execution_log WHERE task_id = {id}")), 1);
    }

    #[pg_test]
    fn tasks_claim_and_release_use_their_own_time_not_the_transactions() {
        // A #[pg_test] is one transaction: now() stays at its start.
        let id = due_task("t1", Some("* * * * *"));
        run("SELECT pg_sleep(0.05)");
        assert!(claim(id, "w1"));
        run("SELECT pg_sleep(0.05)");
        run(&format!("SELECT distlock.release_task_lock({id}, 'w1', 'completed')"));
        assert_eq!(
            one::<bool>(&format!(
                "SELECT l.started_at >= now() + interval '50 milliseconds' \
                    AND l.completed_at - l.started_at >= interval '50 milliseconds' \
                    AND t.last_run_at = l.started_at \
                    AND t.next_run_at = distlock.cron_next('* * * * *', l.completed_at) \
                   FROM distlock.task_execution_log l JOIN distlock.scheduled_tasks t ON t.id = l.task_id \
                  WHERE l.task_id = {id}"
            )),
            Some(true)
        );
    }

    #[pg_test]
    fn tasks_disabled_task_is_not_claimed() {
        let id = due_task("t1", None);
        run(&format!("UPDATE distlock.scheduled_tasks SET is_enabled = false WHERE id = {id}"));
        assert!(!claim(id, "w1"));
        assert_eq!(count("SELECT 1 FROM distlock.task_execution_log"), 0);
        assert_eq!(count("SELECT 1 FROM distlock.task_lock_holders WHERE pid = pg_backend_pid()"), 0);
    }

    #[pg_test(error = "retry_delay of task \"slow\" must be at most 1 hour, got 02:00:00")]
    fn tasks_retry_delay_over_an_hour_is_refused() {
        run("INSERT INTO distlock.scheduled_tasks (task_name, task_type, retry_delay) VALUES ('slow', 'x', '2 hours')");
    }

    #[pg_test(error = "task 987654 does not exist")]
    fn tasks_unknown_task_is_an_error() {
        claim(987654, "w1");
    }

    #[pg_test(error = "p_worker_id must not be NULL")]
    fn tasks_null_worker_is_an_error() {
        let id = due_task("t1", None);
        run(&format!("SELECT distlock.try_acquire_task_lock({id}, NULL)"));
    }

    #[pg_test(error = "p_worker_id must not be blank, got \"  \"")]
    fn tasks_blank_worker_is_an_error() {
        let id = due_task("t1", None);
        claim(id, "  ");
    }

    #[pg_test(error = "p_task_id must not be NULL")]
    fn tasks_null_task_is_an_error() {
        run("SELECT distlock.try_acquire_task_lock(NULL, 'w')");
    }

    #[pg_test]
    fn tasks_release_completed_moves_to_next_cron_slot() {
        let id = due_task("t1", Some("@hourly"));
        assert!(claim(id, "w1"));
        let token = one::<i64>(&format!("SELECT current_token FROM distlock.scheduled_tasks WHERE id = {id}"));
        assert_eq!(
            one::<bool>(&format!("SELECT distlock.check_fencing_token({id}, {})", token.expect("token"))),
            Some(true)
        );
        run(&format!("SELECT distlock.release_task_lock({id}, 'w1', 'completed')"));
        assert_eq!(
            one::<bool>(&format!(
                "SELECT next_run_at = distlock.cron_next('@hourly', now()) AND current_token IS NULL \
                 AND last_status = 'completed' AND consecutive_failures = 0 \
                 FROM distlock.scheduled_tasks WHERE id = {id}"
            )),
            Some(true)
        );
        assert_eq!(
            one::<bool>(&format!("SELECT distlock.check_fencing_token({id}, {})", token.expect("token"))),
            Some(false)
        );
        assert_eq!(
            count(&format!(
                "SELECT 1 FROM distlock.task_execution_log WHERE task_id = {id} AND status = 'completed' \
                 AND completed_at IS NOT NULL AND error_message IS NULL"
            )),
            1
        );
    }

    #[pg_test]
    fn tasks_release_without_cron_leaves_task_undue() {
        let id = due_task("t1", None);
        assert!(claim(id, "w1"));
        run(&format!("SELECT distlock.release_task_lock({id}, 'w1', 'completed')"));
        assert_eq!(
            one::<bool>(&format!("SELECT next_run_at IS NULL FROM distlock.scheduled_tasks WHERE id = {id}")),
            Some(true)
        );
    }

    #[pg_test]
    fn tasks_failure_backs_off_with_jitter_then_waits_for_next_slot() {
        let id = due_task("t1", Some("@daily"));
        run(&format!("UPDATE distlock.scheduled_tasks SET retry_delay = '100 seconds', consecutive_failures = 2 WHERE id = {id}"));
        assert!(claim(id, "w1"));
        assert_eq!(
            one::<i32>(&format!("SELECT attempt FROM distlock.task_execution_log WHERE task_id = {id}")),
            Some(3)
        );
        run(&format!("SELECT distlock.release_task_lock({id}, 'w1', 'failed', 'boom')"));
        // Third failure: 100 s * 2^2 = 400 s, jittered to 200..400 s.
        assert_eq!(
            one::<bool>(&format!(
                "SELECT next_run_at BETWEEN now() + interval '200 seconds' AND now() + interval '400 seconds' \
                 AND consecutive_failures = 3 AND last_status = 'failed' \
                 FROM distlock.scheduled_tasks WHERE id = {id}"
            )),
            Some(true)
        );
        assert_eq!(
            one::<String>(&format!("SELECT error_message FROM distlock.task_execution_log WHERE task_id = {id}")),
            Some("boom".into())
        );
    }

    #[pg_test]
    fn tasks_after_max_retries_failures_the_task_waits_for_its_next_slot() {
        let id = due_task("t1", Some("@daily"));
        run(&format!("UPDATE distlock.scheduled_tasks SET consecutive_failures = 3, max_retries = 3 WHERE id = {id}"));
        assert!(claim(id, "w1"));
        run(&format!("SELECT distlock.release_task_lock({id}, 'w1', 'failed')"));
        assert_eq!(
            one::<bool>(&format!(
                "SELECT next_run_at = distlock.cron_next('@daily', now()) AND consecutive_failures = 0 \
                 FROM distlock.scheduled_tasks WHERE id = {id}"
            )),
            Some(true)
        );
    }

    #[pg_test(error = "p_status must be 'completed' or 'failed', got \"done\"")]
    fn tasks_release_rejects_unknown_status() {
        let id = due_task("t1", None);
        assert!(claim(id, "w1"));
        run(&format!("SELECT distlock.release_task_lock({id}, 'w1', 'done')"));
    }

    #[pg_test(error = "task 9001 is not claimed by this session")]
    fn tasks_release_by_a_non_holder_is_refused() {
        let id = due_task_with_id(9001);
        // A claim recorded for another backend: this session holds nothing.
        run(&format!(
            "INSERT INTO distlock.task_execution_log (task_id, worker_id, status, holder_pid, holder_backend_start) \
             VALUES ({id}, 'w1', 'running', pg_backend_pid() + 100000, now())"
        ));
        run(&format!("SELECT distlock.release_task_lock({id}, 'w1', 'completed')"));
    }

    #[pg_test(error = "task 9002 is claimed by worker \"w1\", not \"w2\"")]
    fn tasks_release_names_the_real_worker() {
        let id = due_task_with_id(9002);
        assert!(claim(id, "w1"));
        run(&format!("SELECT distlock.release_task_lock({id}, 'w2', 'completed')"));
    }

    #[pg_test(error = "task 9003 was already released in this transaction")]
    fn tasks_double_release_is_refused() {
        let id = due_task_with_id(9003);
        assert!(claim(id, "w1"));
        run(&format!("SELECT distlock.release_task_lock({id}, 'w1', 'completed')"));
        run(&format!("SELECT distlock.release_task_lock({id}, 'w1', 'completed')"));
    }

    #[pg_test(error = "task 4242 does not exist")]
    fn tasks_release_of_unknown_task_is_an_error() {
        run("SELECT distlock.release_task_lock(4242, 'w1', 'completed')");
    }

    #[pg_test]
    fn tasks_a_claim_rolled_back_in_a_subtransaction_gives_the_lock_back() {
        let id = due_task("t1", None);
        run(&format!(
            "DO $$ BEGIN \
               BEGIN PERFORM distlock.try_acquire_task_lock({id}, 'w1'); RAISE EXCEPTION 'boom'; \
               EXCEPTION WHEN raise_exception THEN NULL; END; \
             END $$"
        ));
        assert_eq!(count("SELECT 1 FROM distlock.task_lock_holders WHERE pid = pg_backend_pid()"), 0);
        assert_eq!(count("SELECT 1 FROM distlock.task_execution_log"), 0);
        assert!(claim(id, "w1"));
    }

    #[pg_test]
    fn tasks_a_release_rolled_back_in_a_subtransaction_keeps_the_claim() {
        let id = due_task("t1", None);
        assert!(claim(id, "w1"));
        release_then_roll_back(id, "w1");
        assert_eq!(count("SELECT 1 FROM distlock.running_tasks WHERE holder_alive"), 1);
        run(&format!("SELECT distlock.release_task_lock({id}, 'w1', 'completed')"));
        assert_eq!(count("SELECT 1 FROM distlock.running_tasks"), 0);
    }

    #[pg_test]
    fn tasks_runs_are_counted_by_status_when_their_release_commits() {
        let failing = due_task("t1", None);
        let id = due_task("t2", None);
        let totals = || {
            one::<String>(
                "SELECT concat_ws('/', sum(runs_completed), sum(runs_failed), sum(runs_timed_out), sum(runs_abandoned)) \
                 FROM distlock.task_schedule",
            )
        };
        assert_eq!(totals(), Some("0/0/0/0".into()));
        assert!(claim(failing, "w1"));
        run(&format!("SELECT distlock.release_task_lock({failing}, 'w1', 'failed', 'boom')"));
        assert!(claim(id, "w1"));
        // A release that rolls back counts nothing.
        release_then_roll_back(id, "w1");
        assert_eq!(totals(), Some("0/1/0/0".into()));
        run(&format!("SELECT distlock.release_task_lock({id}, 'w1', 'completed')"));
        assert_eq!(totals(), Some("1/1/0/0".into()));
        // The sweep's endings count too, and the sweep adds up what it recovered.
        run(&format!(
            "INSERT INTO distlock.task_execution_log (task_id, worker_id, status, holder_pid, holder_backend_start, fencing_token) \
             VALUES ({id}, 'ghost', 'running', 2147483000, now() - interval '1 day', 78); \
             UPDATE distlock.scheduled_tasks SET current_token = 78 WHERE id = {id}"
        ));
        assert_eq!(count("SELECT * FROM distlock.check_and_recover_timeout_tasks()"), 1);
        assert_eq!(totals(), Some("1/1/0/1".into()));
        assert_eq!(count("SELECT * FROM distlock.check_and_recover_timeout_tasks()"), 0);
        assert_eq!(
            one::<String>("SELECT runs || '/' || recovered_total FROM distlock.sweep_status"),
            Some("2/1".into())
        );
    }

    #[pg_test]
    fn tasks_fetch_claims_the_earliest_due_task_then_none() {
        run("INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at, is_enabled) VALUES \
             ('later', 'a', now() - interval '1 minute', true), \
             ('earliest', 'b', now() - interval '1 hour', true), \
             ('disabled', 'c', now() - interval '2 hours', false), \
             ('future', 'd', now() + interval '1 hour', true)");
        let first = Spi::get_three::<String, String, bool>(
            "SELECT task_name, task_type, acquired FROM distlock.worker_fetch_and_execute_task('w1')",
        )
        .expect("row");
        assert_eq!(first, (Some("earliest".into()), Some("b".into()), Some(true)));
        let second = one::<String>("SELECT task_name FROM distlock.worker_fetch_and_execute_task('w1')");
        assert_eq!(second, Some("later".into()));
        let none = one::<bool>(
            "SELECT task_id IS NULL AND task_name IS NULL AND task_type IS NULL AND fencing_token IS NULL \
             AND NOT acquired FROM distlock.worker_fetch_and_execute_task('w1')",
        );
        assert_eq!(none, Some(true));
    }

    #[pg_test]
    fn tasks_multiple_claims_up_to_the_limit_in_due_order() {
        run("INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at) \
             SELECT 'task' || i, 'x', now() - i * interval '1 minute' FROM generate_series(1, 5) i");
        let names = one::<String>(
            "SELECT string_agg(task_name, ',' ORDER BY fencing_token) \
             FROM distlock.try_acquire_multiple_tasks('w1', 3) WHERE acquired",
        );
        assert_eq!(names, Some("task5,task4,task3".into()));
        assert_eq!(count("SELECT * FROM distlock.try_acquire_multiple_tasks('w1')"), 2);
        assert_eq!(count("SELECT * FROM distlock.try_acquire_multiple_tasks('w1', 1000)"), 0);
    }

    #[pg_test]
    fn tasks_fetch_reads_past_a_page_of_held_tasks_due_at_the_same_moment() {
        // 40 tasks due at one instant: ties are ordered by id, and the 35
        // this session holds fill more than one page of candidates.
        run("INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at) \
             SELECT 'task' || i, 'x', '2000-01-01' FROM generate_series(1, 40) i");
        assert_eq!(count("SELECT * FROM distlock.try_acquire_multiple_tasks('w1', 35)"), 35);
        let next = one::<String>("SELECT task_name FROM distlock.worker_fetch_and_execute_task('w1')");
        assert_eq!(next, Some("task36".into()));
        let rest = one::<String>(
            "SELECT string_agg(task_name, ',' ORDER BY task_name) FROM distlock.try_acquire_multiple_tasks('w1', 10)",
        );
        assert_eq!(rest, Some("task37,task38,task39,task40".into()));
    }

    #[pg_test(error = "p_max_tasks must be between 1 and 1000, got 0")]
    fn tasks_multiple_rejects_zero() {
        run("SELECT * FROM distlock.try_acquire_multiple_tasks('w1', 0)");
    }

    #[pg_test(error = "p_max_tasks must be between 1 and 1000, got 1001")]
    fn tasks_multiple_rejects_too_many() {
        run("SELECT * FROM distlock.try_acquire_multiple_tasks('w1', 1001)");
    }

    #[pg_test]
    fn tasks_release_and_fetch_ends_the_run_and_claims_the_next_due_task() {
        run("INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at) VALUES \
             ('first', 'a', now() - interval '1 hour'), ('second', 'b', now() - interval '1 minute')");
        let first = one::<i32>("SELECT task_id FROM distlock.worker_fetch_and_execute_task('w1')").expect("first");
        let next = Spi::get_three::<String, String, bool>(&format!(
            "SELECT task_name, task_type, acquired FROM distlock.release_and_fetch_task({first}, 'w1', 'completed')"
        ))
        .expect("row");
        assert_eq!(next, (Some("second".into()), Some("b".into()), Some(true)));
        assert_eq!(
            count(&format!(
                "SELECT 1 FROM distlock.task_execution_log l JOIN distlock.scheduled_tasks t ON t.id = l.task_id \
                 WHERE t.id = {first} AND l.status = 'completed' AND t.next_run_at IS NULL AND t.current_token IS NULL"
            )),
            1,
            "the first run ended and its task moved on"
        );
        assert_eq!(
            count(
                "SELECT 1 FROM distlock.task_execution_log l JOIN distlock.scheduled_tasks t ON t.id = l.task_id \
                 WHERE t.task_name = 'second' AND l.status = 'running' AND l.worker_id = 'w1' \
                 AND l.fencing_token = t.current_token"
            ),
            1
        );
        let last = one::<bool>(
            "SELECT NOT acquired AND task_id IS NULL FROM distlock.release_and_fetch_task( \
               (SELECT id FROM distlock.scheduled_tasks WHERE task_name = 'second'), 'w1', 'failed', 'boom')",
        );
        assert_eq!(last, Some(true), "nothing left to claim");
        assert_eq!(
            count("SELECT 1 FROM distlock.task_execution_log WHERE status = 'failed' AND error_message = 'boom'"),
            1
        );
    }

    #[pg_test(error = "task 9004 is not claimed by this session")]
    fn tasks_release_and_fetch_refuses_a_task_this_session_does_not_hold() {
        due_task_with_id(9004);
        run("SELECT * FROM distlock.release_and_fetch_task(9004, 'w1', 'completed')");
    }

    #[pg_test]
    fn tasks_release_and_fetch_by_token_ends_the_lease_and_leases_the_next_due_task() {
        run("INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at) VALUES \
             ('first', 'a', now() - interval '1 hour'), ('second', 'b', now() - interval '1 minute')");
        let (first, token) = Spi::get_two::<i32, i64>(
            "SELECT task_id, fencing_token FROM distlock.worker_fetch_and_execute_task('w1', '30 seconds')",
        )
        .expect("first");
        let (first, token) = (first.expect("id"), token.expect("token"));
        let next_token = one::<i64>(&format!(
            "SELECT fencing_token FROM distlock.release_and_fetch_task({first}, {token}, 'completed', 'w1', '30 seconds') \
             WHERE acquired AND task_name = 'second'"
        ))
        .expect("the second task, leased");
        assert!(next_token > token);
        assert_eq!(
            count(&format!(
                "SELECT 1 FROM distlock.scheduled_tasks WHERE id = {first} AND lease_expires_at IS NULL \
                 AND current_token IS NULL AND last_status = 'completed'"
            )),
            1
        );
        assert_eq!(
            count(&format!(
                "SELECT 1 FROM distlock.scheduled_tasks WHERE task_name = 'second' AND current_token = {next_token} \
                 AND lease_expires_at > now()"
            )),
            1
        );
    }

    #[pg_test(error = "task 9005 has no live lease-mode claim with token 1")]
    fn tasks_release_and_fetch_by_token_refuses_a_token_that_is_not_live() {
        due_task_with_id(9005);
        run("SELECT * FROM distlock.release_and_fetch_task(9005, 1, 'completed', 'w1', '30 seconds')");
    }

    #[pg_test]
    fn tasks_fencing_tokens_strictly_increase_across_tasks() {
        run("INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at) \
             SELECT 'task' || i, 'x', now() - i * interval '1 minute' FROM generate_series(1, 4) i");
        assert_eq!(count("SELECT * FROM distlock.try_acquire_multiple_tasks('w1', 4)"), 4);
        let increasing = one::<bool>(
            "SELECT bool_and(fencing_token > prev) FROM ( \
               SELECT fencing_token, lag(fencing_token) OVER (ORDER BY id) AS prev \
               FROM distlock.task_execution_log) s WHERE prev IS NOT NULL",
        );
        assert_eq!(increasing, Some(true));
    }

    #[pg_test(error = "p_token must not be NULL")]
    fn tasks_fencing_check_rejects_null() {
        run("SELECT distlock.check_fencing_token(1, NULL)");
    }

    #[pg_test]
    fn tasks_sweep_abandons_claims_of_vanished_backends() {
        let id = due_task("t1", Some("@daily"));
        run(&format!(
            "INSERT INTO distlock.task_execution_log (task_id, worker_id, status, holder_pid, holder_backend_start, fencing_token) \
             VALUES ({id}, 'ghost', 'running', 2147483000, now() - interval '1 day', 77); \
             UPDATE distlock.scheduled_tasks SET current_token = 77 WHERE id = {id}"
        ));
        let swept = Spi::get_three::<i32, String, bool>(
            "SELECT task_id, worker_id, lock_released FROM distlock.check_and_recover_timeout_tasks()",
        )
        .expect("row");
        assert_eq!(swept, (Some(id), Some("ghost".into()), Some(true)));
        assert_eq!(
            one::<bool>(&format!(
                "SELECT status = 'abandoned' AND completed_at IS NOT NULL AND error_message LIKE '%is gone' \
                 FROM distlock.task_execution_log WHERE task_id = {id}"
            )),
            Some(true)
        );
        // The slot was never finished: the task stays due and claimable.
        assert_eq!(
            one::<bool>(&format!(
                "SELECT current_token IS NULL AND next_run_at <= now() FROM distlock.scheduled_tasks WHERE id = {id}"
            )),
            Some(true)
        );
        assert!(claim(id, "w2"));
        assert_eq!(
            one::<String>("SELECT runs || '/' || last_recovered FROM distlock.sweep_status"),
            Some("1/1".into()),
            "each run is recorded, with what it recovered"
        );
        assert_eq!(count("SELECT * FROM distlock.check_and_recover_timeout_tasks()"), 0);
        assert_eq!(
            one::<String>("SELECT runs || '/' || last_recovered FROM distlock.sweep_status"),
            Some("2/0".into()),
            "a run that recovers nothing is recorded too"
        );
    }

    #[pg_test]
    fn tasks_sweep_times_out_overdue_claims() {
        let id = due_task("t1", Some("@daily"));
        assert!(claim(id, "w1"));
        run(&format!(
            "UPDATE distlock.task_execution_log SET started_at = now() - interval '31 minutes' WHERE task_id = {id}"
        ));
        // Not overdue against a 60-minute default.
        assert_eq!(count("SELECT * FROM distlock.check_and_recover_timeout_tasks(60)"), 0);
        // The holder is this very session, so the sweep drops the lock itself at commit.
        let swept = Spi::get_two::<i32, bool>(
            "SELECT task_id, lock_released FROM distlock.check_and_recover_timeout_tasks()",
        )
        .expect("row");
        assert_eq!(swept, (Some(id), Some(true)));
        assert_eq!(
            one::<bool>(&format!(
                "SELECT l.status = 'timed_out' AND t.last_status = 'timed_out' AND t.consecutive_failures = 1 \
                 AND t.current_token IS NULL \
                 FROM distlock.task_execution_log l JOIN distlock.scheduled_tasks t ON t.id = l.task_id"
            )),
            Some(true)
        );
    }

    #[pg_test]
    fn tasks_sweep_uses_the_task_timeout_over_the_default() {
        let id = due_task("t1", None);
        run(&format!("UPDATE distlock.scheduled_tasks SET timeout = '5 minutes' WHERE id = {id}"));
        assert!(claim(id, "w1"));
        run("UPDATE distlock.task_execution_log SET started_at = now() - interval '6 minutes'");
        assert_eq!(count("SELECT * FROM distlock.check_and_recover_timeout_tasks(30)"), 1);
    }

    #[pg_test(error = "p_timeout_minutes must be positive, got 0")]
    fn tasks_sweep_rejects_zero_timeout() {
        run("SELECT * FROM distlock.check_and_recover_timeout_tasks(0)");
    }

    #[pg_test(error = "p_timeout_minutes must be positive, got -5")]
    fn tasks_sweep_rejects_negative_timeout() {
        run("SELECT * FROM distlock.check_and_recover_timeout_tasks(-5)");
    }

    #[pg_test(error = "p_timeout_minutes must not be NULL")]
    fn tasks_sweep_rejects_null_timeout() {
        run("SELECT * FROM distlock.check_and_recover_timeout_tasks(NULL)");
    }

    #[pg_test]
    fn tasks_prune_deletes_only_old_finished_rows() {
        let id = due_task("t1", None);
        run(&format!(
            "INSERT INTO distlock.task_execution_log (task_id, worker_id, status, started_at, completed_at) VALUES \
             ({id}, 'w', 'completed', now() - interval '10 days', now() - interval '10 days'), \
             ({id}, 'w', 'failed', now() - interval '9 days', now() - interval '9 days'), \
             ({id}, 'w', 'completed', now() - interval '1 hour', now() - interval '1 hour'), \
             ({id}, 'w', 'running', now() - interval '20 days', NULL)"
        ));
        assert_eq!(one::<i64>("SELECT distlock.prune_execution_log('7 days')"), Some(2));
        assert_eq!(count("SELECT 1 FROM distlock.task_execution_log"), 2);
        assert_eq!(one::<i64>("SELECT distlock.prune_execution_log('0')"), Some(1));
    }

    #[pg_test(error = "p_older_than must not be negative, got -1 days")]
    fn tasks_prune_rejects_negative_age() {
        run("SELECT distlock.prune_execution_log('-1 day')");
    }

    #[pg_test]
    fn tasks_insert_with_cron_gets_its_next_occurrence() {
        run("INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron) VALUES ('c', 'x', '0 4 * * *')");
        assert_eq!(
            one::<bool>("SELECT next_run_at = distlock.cron_next('0 4 * * *', now()) FROM distlock.scheduled_tasks"),
            Some(true)
        );
        run("UPDATE distlock.scheduled_tasks SET schedule_cron = '@monthly'");
        assert_eq!(
            one::<bool>("SELECT next_run_at = distlock.cron_next('@monthly', now()) FROM distlock.scheduled_tasks"),
            Some(true)
        );
    }

    #[pg_test(error = "invalid cron expression \"each day\": Invalid pattern: Pattern must have 5 fields when seconds are disallowed.")]
    fn tasks_insert_with_invalid_cron_is_rejected() {
        run("INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron) VALUES ('c', 'x', 'each day')");
    }

    #[pg_test(error = "invalid schedule \"every day\": an interval schedule is 'every N seconds' or 'every N minutes' with N from 1 to 59")]
    fn tasks_insert_with_invalid_interval_is_rejected() {
        run("INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron) VALUES ('c', 'x', 'every day')");
    }

    #[pg_test]
    fn tasks_bad_task_rows_are_refused_with_23514() {
        for (columns, values) in [
            ("task_name, task_type", "' ', 'x'"),
            ("task_name, task_type", "'a', ''"),
            ("task_name, task_type, timeout", "'a', 'x', '-1 minute'"),
            ("task_name, task_type, max_retries", "'a', 'x', -1"),
            ("task_name, task_type, retry_delay", "'a', 'x', '0'"),
        ] {
            run(&format!(
                "DO $$ BEGIN INSERT INTO distlock.scheduled_tasks ({columns}) VALUES ({values}); \
                 RAISE EXCEPTION 'accepted'; EXCEPTION WHEN check_violation THEN NULL; END $$"
            ));
        }
        let id = due_task("ok", None);
        run(&format!(
            "DO $$ BEGIN UPDATE distlock.scheduled_tasks SET max_retries = 5000 WHERE id = {id}; \
             RAISE EXCEPTION 'accepted'; EXCEPTION WHEN check_violation THEN NULL; END $$"
        ));
    }

    #[pg_test(error = "value for domain distlock.run_status violates check constraint \"run_status_known\"")]
    fn tasks_log_status_is_constrained() {
        let id = due_task("t1", None);
        run(&format!(
            "INSERT INTO distlock.task_execution_log (task_id, worker_id, status, completed_at) VALUES ({id}, 'w', 'bogus', now())"
        ));
    }

    #[pg_test]
    fn tasks_views_show_the_claim() {
        let id = due_task("t1", None);
        assert!(claim(id, "w1"));
        assert_eq!(
            count(&format!(
                "SELECT 1 FROM distlock.advisory_locks WHERE is_task_lock AND task_id = {id} AND task_name = 't1' \
                 AND pid = pg_backend_pid() AND granted AND key_kind = 'pg_distlock' AND key2 = {id} \
                 AND held_for IS NOT NULL"
            )),
            1
        );
        assert_eq!(
            count("SELECT 1 FROM distlock.running_tasks WHERE holder_alive AND NOT past_timeout AND worker_id = 'w1'"),
            1
        );
        run(&format!("SELECT distlock.release_task_lock({id}, 'w1', 'completed')"));
        assert_eq!(
            count("SELECT 1 FROM distlock.task_stats WHERE runs = 1 AND completed = 1 AND last_status = 'completed'"),
            1
        );
        assert_eq!(count("SELECT * FROM distlock.lock_waits WHERE blocked_pid = pg_backend_pid()"), 0);
    }

    #[pg_test]
    fn tasks_nothing_is_granted_to_public() {
        assert_eq!(
            count(
                "SELECT 1 FROM pg_proc p WHERE p.pronamespace = 'distlock'::regnamespace \
                 AND (p.proacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(p.proacl) a WHERE a.grantee = 0))"
            ),
            0
        );
        assert_eq!(
            count(
                "SELECT 1 FROM pg_class c WHERE c.relnamespace = 'distlock'::regnamespace \
                 AND c.relkind IN ('r', 'v', 'S') \
                 AND (c.relacl IS NULL OR EXISTS (SELECT 1 FROM aclexplode(c.relacl) a WHERE a.grantee = 0))"
            ),
            0
        );
        assert_eq!(one::<bool>("SELECT has_table_privilege('pg_monitor', 'distlock.running_tasks', 'SELECT')"), Some(true));
    }

    #[pg_test]
    fn tasks_user_tables_are_dumped_by_pg_dump() {
        assert_eq!(
            one::<String>(
                "SELECT string_agg(c::regclass::text, ',' ORDER BY c::regclass::text) \
                 FROM pg_extension e, unnest(e.extconfig) c WHERE e.extname = 'pg_distlock'"
            ),
            Some(
                "distlock.completed_jobs,distlock.fencing_token_seq,distlock.id_generator,distlock.job_attempts,\
                 distlock.leader_state,\
                 distlock.lease_state,distlock.lease_token_seq,distlock.lock_names,distlock.queue_settings,\
                 distlock.role_capabilities,distlock.scheduled_tasks,distlock.scheduled_tasks_id_seq,\
                 distlock.semaphore_holders,distlock.semaphore_state,\
                 distlock.task_execution_log,distlock.task_execution_log_id_seq,\
                 distlock.task_queue,distlock.task_queue_id_seq"
                    .into()
            )
        );
    }
}
