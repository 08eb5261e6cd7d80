//! Memory-mode snowflake marks: server-wide, outside callers' transactions.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

const EPOCH_MS: i64 = 1_609_459_200_000;

fn id_ms(id: i64) -> i64 {
    (id >> 22) + EPOCH_MS
}

fn generate(c: &mut Client, worker_id: i32) -> i64 {
    c.query_one("SELECT distlock.generate_snowflake_id($1)", &[&worker_id]).expect("id").get(0)
}

/// Generates IDs for `worker_id` until `span` of clock time has passed,
/// so that its reservation (100 ms ahead) has to be extended a few times.
fn generate_for(c: &mut Client, worker_id: i32, span: Duration) -> i64 {
    let until = Instant::now() + span;
    let mut last = 0;
    while Instant::now() < until {
        last = generate(c, worker_id);
    }
    last
}

#[test]
fn memory_mode_marks_are_server_wide_and_survive_a_restart_from_any_database() {
    let a = fresh_db("snowflake_db_a");
    let b = fresh_db("snowflake_db_b");
    let before = generate(&mut connect(&a), 9);
    let last_b = generate_for(&mut connect(&b), 9, Duration::from_millis(300));
    assert!(last_b > before);
    assert!(persisted_snowflake_mark(9) >= id_ms(last_b), "the server-wide mark covers IDs issued in another database");
    let first_after = generate(&mut crash_restart_primary(&a), 9);
    assert!(first_after > last_b, "after a restart database A resumes above database B's IDs");
}

#[test]
fn memory_mode_marks_are_kept_when_the_caller_rolls_back() {
    let db = fresh_db("snowflake_rollback");
    let mut c = connect(&db);
    c.batch_execute("BEGIN").expect("begin");
    let last = generate_for(&mut c, 11, Duration::from_millis(300));
    c.batch_execute("ROLLBACK").expect("rollback");
    assert!(persisted_snowflake_mark(11) >= id_ms(last), "IDs handed out before the rollback stay covered");
    assert!(generate(&mut c, 11) > last);
}

#[test]
fn memory_mode_callers_never_wait_for_each_others_transactions() {
    let db = fresh_db("snowflake_no_wait");
    let start = Arc::new(Barrier::new(2));
    // Two open transactions, each having generated for one worker id, then
    // generating for the other's for longer than a reservation lasts: with
    // marks written inside the callers' transactions, each would have to
    // wait for the other's row lock to extend the reservation (a deadlock).
    let sessions: Vec<_> = [(21, 22), (22, 21)]
        .into_iter()
        .map(|(first, second)| {
            let db = db.clone();
            let start = start.clone();
            thread::spawn(move || {
                let mut c = connect(&db);
                c.batch_execute("SET statement_timeout = '2s'; BEGIN").expect("begin");
                generate(&mut c, first);
                start.wait();
                let until = Instant::now() + Duration::from_millis(400);
                let mut ids = Vec::new();
                while Instant::now() < until {
                    match c.query_one("SELECT distlock.generate_snowflake_id($1)", &[&second]) {
                        Ok(row) => ids.push(row.get::<_, i64>(0)),
                        Err(e) => return Err(format!("{e:?}")),
                    }
                }
                c.batch_execute("COMMIT").expect("commit");
                Ok(ids)
            })
        })
        .collect();
    let mut all = Vec::new();
    for s in sessions {
        let ids = s.join().expect("session").unwrap_or_else(|e| panic!("a caller waited or deadlocked: {e}"));
        all.extend(ids);
    }
    let distinct: std::collections::HashSet<_> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "every ID is unique");
}
