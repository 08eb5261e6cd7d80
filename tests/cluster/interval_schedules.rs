//! Interval schedules (issue 48, item 3) under a fleet: ten workers on one
//! `every 1 second` task and one `every 2 seconds` task for a while; each
//! slot runs at most once, runs never overlap, slots are whole multiples of
//! the period, and nearly every slot runs.

use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

#[test]
fn interval_schedules_run_each_slot_once_without_overlap_under_ten_workers() {
    let db = fresh_db("interval_schedules_fleet");
    let mut admin = connect(&db);
    admin
        .batch_execute(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron) VALUES \
               ('tick-1s', 'tick', 'every 1 second'), ('tick-2s', 'tick', 'every 2 seconds'); \
             CREATE TABLE inflight (task_id int PRIMARY KEY);",
        )
        .expect("tasks");
    let run_for = Duration::from_secs(12);
    let started = Instant::now();
    let workers: Vec<_> = (0..10)
        .map(|w| {
            let db = db.clone();
            thread::spawn(move || {
                let mut c = connect(&db);
                let worker = format!("w{w}");
                while started.elapsed() < run_for {
                    let row = c
                        .query_one(
                            "SELECT task_id, acquired FROM distlock.worker_fetch_and_execute_task($1)",
                            &[&worker],
                        )
                        .expect("fetch");
                    let (task_id, acquired): (Option<i32>, Option<bool>) = (row.get(0), row.get(1));
                    let Some(task_id) = task_id.filter(|_| acquired == Some(true)) else {
                        // Nothing due: poll again soon, as a worker's loop does.
                        thread::sleep(Duration::from_millis(20));
                        continue;
                    };
                    // A second overlapping run of the task would hit the primary key.
                    c.execute("INSERT INTO inflight VALUES ($1)", &[&task_id]).expect("no overlapping run");
                    thread::sleep(Duration::from_millis(150)); // the task's own work
                    c.execute("DELETE FROM inflight WHERE task_id = $1", &[&task_id]).expect("done");
                    c.execute("SELECT distlock.release_task_lock($1, $2, 'completed')", &[&task_id, &worker])
                        .expect("release");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker");
    }
    for (task, period) in [("tick-1s", 1), ("tick-2s", 2)] {
        let runs = count(
            &mut admin,
            &format!(
                "SELECT 1 FROM distlock.task_execution_log l JOIN distlock.scheduled_tasks t ON t.id = l.task_id \
                  WHERE t.task_name = '{task}'"
            ),
        );
        let slots = count(
            &mut admin,
            &format!(
                "SELECT DISTINCT l.scheduled_for FROM distlock.task_execution_log l \
                   JOIN distlock.scheduled_tasks t ON t.id = l.task_id WHERE t.task_name = '{task}'"
            ),
        );
        assert_eq!(runs, slots, "{task}: each slot ran at most once");
        let off_grid = count(
            &mut admin,
            &format!(
                "SELECT 1 FROM distlock.task_execution_log l JOIN distlock.scheduled_tasks t ON t.id = l.task_id \
                  WHERE t.task_name = '{task}' AND extract(epoch FROM l.scheduled_for) % {period} <> 0"
            ),
        );
        assert_eq!(off_grid, 0, "{task}: every slot is a whole multiple of the period since 1970");
        let overlapping = count(
            &mut admin,
            &format!(
                "SELECT 1 FROM (SELECT l.started_at, lag(l.completed_at) OVER (ORDER BY l.started_at) AS previous_end \
                                  FROM distlock.task_execution_log l JOIN distlock.scheduled_tasks t ON t.id = l.task_id \
                                 WHERE t.task_name = '{task}') r \
                  WHERE r.started_at < r.previous_end"
            ),
        );
        assert_eq!(overlapping, 0, "{task}: no run began before the previous one ended");
        // 12 s of slots, less the first (the task is created before the
        // fleet starts) and a margin for a loaded machine.
        let expected = 12 / period;
        assert!(runs >= expected - 3, "{task}: {runs} runs in 12 s, expected about {expected}");
    }
}
