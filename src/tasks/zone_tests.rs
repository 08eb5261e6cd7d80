//! Tasks whose schedule follows a time zone's wall clock: the first slot
//! (the trigger), each next one (the release), the zone's validation, and
//! distlock.timezone for tasks that name none.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_sql::{one, required, run};

    /// A task on `cron` in `zone` (SQL: a quoted name or NULL), its first
    /// slot computed by the trigger; returns its id.
    fn task(name: &str, cron: &str, zone: &str) -> i32 {
        required::<i32>(&format!(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, schedule_timezone) \
             VALUES ('{name}', 'test', '{cron}', {zone}) RETURNING id"
        ))
    }

    /// Fails the test unless `statement` raises 22023.
    fn refused_22023(statement: &str) {
        run(&format!(
            "DO $test$ BEGIN EXECUTE $q${statement}$q$; RAISE EXCEPTION 'accepted: %', $q${statement}$q$; \
             EXCEPTION WHEN invalid_parameter_value THEN NULL; END $test$"
        ));
    }

    fn next_run_is(id: i32, expected: &str) -> bool {
        one::<bool>(&format!("SELECT next_run_at = ({expected}) FROM distlock.scheduled_tasks WHERE id = {id}"))
            == Some(true)
    }

    #[pg_test]
    fn task_zone_sets_the_first_slot_on_its_wall_clock() {
        let berlin = task("berlin", "0 3 * * *", "'Europe/Berlin'");
        assert!(next_run_is(berlin, "distlock.cron_next('0 3 * * *', now(), 'Europe/Berlin')"));
        assert!(one::<bool>(&format!(
            "SELECT (next_run_at AT TIME ZONE 'Europe/Berlin')::time = time '03:00' \
               FROM distlock.scheduled_tasks WHERE id = {berlin}"
        )) == Some(true));
        // No zone: distlock.timezone, UTC by default, as before 0.4.0.
        let plain = task("plain", "0 3 * * *", "NULL");
        assert!(next_run_is(plain, "distlock.cron_next('0 3 * * *', now())"));
    }

    #[pg_test]
    fn task_zone_change_moves_the_next_slot() {
        let id = task("moves", "0 3 * * *", "NULL");
        run(&format!("UPDATE distlock.scheduled_tasks SET schedule_timezone = 'Asia/Kolkata' WHERE id = {id}"));
        assert!(next_run_is(id, "distlock.cron_next('0 3 * * *', now(), 'Asia/Kolkata')"));
        // A next_run_at set in the same statement is kept (as for schedule_cron).
        run(&format!(
            "UPDATE distlock.scheduled_tasks SET schedule_timezone = 'UTC', \
                    next_run_at = timestamptz '2030-01-01 00:00:00+00' WHERE id = {id}"
        ));
        assert!(next_run_is(id, "timestamptz '2030-01-01 00:00:00+00'"));
    }

    #[pg_test]
    fn task_zone_release_schedules_the_next_slot_in_the_zone() {
        let id = task("chatham", "*/5 * * * *", "'Pacific/Chatham'");
        run(&format!("UPDATE distlock.scheduled_tasks SET next_run_at = now() - interval '1 second' WHERE id = {id}"));
        assert_eq!(one::<bool>(&format!("SELECT distlock.try_acquire_task_lock({id}, 'w1')")), Some(true));
        run(&format!("SELECT distlock.release_task_lock({id}, 'w1', 'completed')"));
        assert_eq!(
            one::<bool>(&format!(
                "SELECT t.next_run_at = distlock.cron_next('*/5 * * * *', l.completed_at, 'Pacific/Chatham') \
                   FROM distlock.task_execution_log l JOIN distlock.scheduled_tasks t ON t.id = l.task_id \
                  WHERE l.task_id = {id}"
            )),
            Some(true)
        );
    }

    #[pg_test]
    fn task_zone_unknown_is_refused_on_insert_and_update_with_22023() {
        refused_22023(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, schedule_timezone) \
             VALUES ('mars', 'test', '@daily', 'Mars/Olympus_Mons')",
        );
        // Refused without a schedule too: the zone is kept for when one is set.
        refused_22023(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_timezone) \
             VALUES ('mars', 'test', 'Mars/Olympus_Mons')",
        );
        let id = task("earth", "@daily", "'UTC'");
        refused_22023(&format!(
            "UPDATE distlock.scheduled_tasks SET schedule_timezone = 'Europe/Nowhere' WHERE id = {id}"
        ));
    }

    #[pg_test(error = "schedule_timezone of task \"mars\" is not a time zone this server knows, got \"Mars/Olympus_Mons\"")]
    fn task_zone_unknown_is_named_in_the_error() {
        task("mars", "@daily", "'Mars/Olympus_Mons'");
    }

    #[pg_test(error = "parameter \"distlock.timezone\" cannot be changed now")]
    fn task_zone_setting_is_server_wide() {
        // Every worker must compute the same next slot: no per-session zone.
        run("SET distlock.timezone = 'Europe/Berlin'");
    }
}
