//! distlock.run_task_now (run_now.rs), in one session.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_sql::{assert_sqlstate, one, run};

    /// A task that runs daily at 03:00, next due at its next slot.
    fn daily_task(name: &str, enabled: bool) -> i32 {
        one::<i32>(&format!(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at, is_enabled) \
             VALUES ('{name}', 'report', '0 3 * * *', distlock.cron_next('0 3 * * *', now()), {enabled}) RETURNING id"
        ))
        .expect("id")
    }

    #[pg_test]
    fn tasks_run_now_makes_a_task_due_once_without_changing_its_schedule() {
        let id = daily_task("nightly", true);
        assert_eq!(one::<bool>(&format!("SELECT distlock.run_task_now({id})")), Some(true));
        // Due: the next worker to look claims it, for the slot "now".
        let claimed = one::<i32>("SELECT task_id FROM distlock.worker_fetch_and_execute_task('w1')");
        assert_eq!(claimed, Some(id));
        assert_eq!(
            one::<bool>(&format!(
                "SELECT scheduled_for = now() FROM distlock.task_execution_log WHERE task_id = {id} AND status = 'running'"
            )),
            Some(true),
            "the run's slot is now"
        );
        // While it runs, asking again changes nothing.
        assert_eq!(one::<bool>(&format!("SELECT distlock.run_task_now({id})")), Some(false));
        run(&format!("SELECT distlock.release_task_lock({id}, 'w1', 'completed')"));
        // The release schedules the next run from the schedule, as always.
        assert_eq!(
            one::<bool>(&format!(
                "SELECT t.next_run_at = distlock.cron_next('0 3 * * *', l.completed_at) AND t.next_run_at > now() \
                   FROM distlock.scheduled_tasks t JOIN distlock.task_execution_log l ON l.task_id = t.id \
                  WHERE t.id = {id}"
            )),
            Some(true)
        );
    }

    #[pg_test]
    fn tasks_run_now_of_a_task_due_already_is_false() {
        let id = daily_task("due", true);
        run(&format!("UPDATE distlock.scheduled_tasks SET next_run_at = now() - interval '1 hour' WHERE id = {id}"));
        assert_eq!(one::<bool>(&format!("SELECT distlock.run_task_now({id})")), Some(false));
        assert_eq!(
            one::<bool>(&format!("SELECT next_run_at = now() - interval '1 hour' FROM distlock.scheduled_tasks WHERE id = {id}")),
            Some(true),
            "its earlier slot is kept"
        );
    }

    #[pg_test]
    fn tasks_run_now_refuses_a_disabled_unknown_or_null_task() {
        let id = daily_task("off", false);
        assert_sqlstate(&format!("distlock.run_task_now({id})"), "55000");
        assert_sqlstate("distlock.run_task_now(2147483647)", "P0002");
        assert_sqlstate("distlock.run_task_now(NULL)", "22004");
    }
}
