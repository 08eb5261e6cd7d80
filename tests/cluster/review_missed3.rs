//! Third review of the missed-run work (commit 790181d, issue 48):
//! distlock.next_task_wait(). Each test fails until it is fixed.

use std::thread;
use std::time::Duration;

use crate::support::*;

/// A worker scoped to `acme:` learns about another tenant's tasks from
/// next_task_wait(): src/tasks/next_wait.rs reads all tenants' tasks in
/// pages of 8 (sql/queries/next_task_wait.sql has no scope filter) and
/// answers NULL once the caller's first task lies behind 80 others. So the
/// answer for the *same* `acme:` task flips between its wait and NULL as
/// one foreign task's `next_run_at` moves before or after it (or as
/// foreign tasks are claimed, released, enabled, created): a scoped role
/// reads whether another tenant has at least 80 tasks due before its own,
/// and, with 79 of them known, exactly when one more comes or goes.
/// docs/privileges.md promises a scoped role sees nothing of the tasks
/// outside its scope. Fix: filter by the caller's scope in the query
/// (a scope predicate on task_name/task_type, as the fetch's), so that the
/// answer depends only on tasks in scope.
#[test]
fn review_missed3_next_task_wait_tells_a_scoped_worker_about_other_tenants_tasks() {
    let db = fresh_db("review_missed3_scope_leak");
    let mut c = connect(&db);
    ensure_role(&mut c, "review_missed3_acme");
    c.batch_execute(
        "SELECT distlock.grant_capability('review_missed3_acme', 'worker', 'acme:');
         INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)
         VALUES ('acme:report', 'acme:report', '0 * * * *', now() + interval '1 hour');
         INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)
         SELECT 'globex:' || g, 'globex', '0 * * * *', now() + interval '10 minutes' FROM generate_series(1, 79) g;
         INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)
         VALUES ('globex:moving', 'globex', '0 * * * *', now() + interval '2 hours');",
    )
    .expect("one acme task, 80 of another tenant's");
    let wait = |c: &mut Client| {
        as_role(c, "review_missed3_acme", |c| scalar(c, "SELECT distlock.next_task_wait() IS NOT NULL"))
    };
    let before = wait(&mut c);
    // Another tenant's admin moves one of its own tasks ahead of acme's.
    c.batch_execute(
        "UPDATE distlock.scheduled_tasks SET next_run_at = now() + interval '20 minutes' WHERE task_name = 'globex:moving'",
    )
    .expect("a foreign task moves");
    let after = wait(&mut c);
    assert_eq!(
        (before.as_deref(), after.as_deref()),
        (Some("t"), Some("t")),
        "acme's own task is due in an hour either way; the answer changed with another tenant's task"
    );
}

/// next_task_wait() leaves out every task with `current_token` set
/// (sql/queries/next_task_wait.sql), but a fetch claims such a task at once
/// when its lease ran out (sql/queries/due_tasks.sql: `lease_expires_at <=
/// now()`): a worker that died mid-run leaves its task reclaimable, and
/// next_task_wait answers NULL ("no task has a next run") or the wait of a
/// later task, so an idle Python TaskWorker sleeps its whole poll interval,
/// or until that later task, while the task is claimable. Fix: leave out
/// only live leases, as due_tasks.sql does (`lease_expires_at IS NULL OR
/// lease_expires_at <= clock`), and session claims whose holder still holds
/// the lock, or report such a task as due at its lease's expiry.
#[test]
fn review_missed3_next_task_wait_hides_a_task_whose_lease_ran_out() {
    let db = fresh_db("review_missed3_expired_lease");
    let mut c = connect(&db);
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)
         VALUES ('etl', 'etl', '0 * * * *', now())",
    )
    .expect("a due task");
    let claimed = count(
        &mut c,
        "SELECT 1 FROM distlock.worker_fetch_and_execute_task('dead', interval '1 second') WHERE acquired",
    );
    assert_eq!(claimed, 1, "a worker claims it with a 1 s lease, and dies");
    thread::sleep(Duration::from_millis(1500));
    let wait = scalar(&mut c, "SELECT distlock.next_task_wait()::text");
    let reclaimable = count(
        &mut c,
        "SELECT 1 FROM distlock.worker_fetch_and_execute_task('other', interval '30 seconds') WHERE acquired",
    );
    assert_eq!(reclaimable, 1, "a fetch reclaims the task at once");
    assert_eq!(wait.as_deref(), Some("00:00:00"), "next_task_wait said {wait:?} for a task claimable now");
}
