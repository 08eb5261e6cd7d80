//! Review 41 (helper-42, on the claim functions' queue column, which did
//! not land): what it found in the update to 0.4.0 that main has too. Each
//! test failed on c5855f8.

use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

/// A role given the monitor capability at 0.3.0 and later dropped the way
/// PostgreSQL drops a role with privileges (DROP OWNED, DROP ROLE), without
/// revoke_capability: its row stays in role_capabilities with the dropped
/// role's oid, which a regrole prints as a number. The update re-grants
/// admin and monitor rows and ran `GRANT ... TO 16709`: a syntax error
/// (42601), and the database could not be updated at all.
#[test]
fn the_update_to_0_4_0_goes_through_with_a_dropped_monitor_role_left_in_role_capabilities() {
    update_goes_through_with_a_dropped_role("review_41_dropped_role", "monitor");
}

/// A consumer waiting since before the update gets a job enqueued two
/// seconds after the update commits, within about a second (a763b52's
/// promise). Its sleeper entry carries 0.3.0's queue hash; it looks again
/// each second only while wake::queues_named_as_0_3_0(), which turns false
/// the moment the update commits, so after its first look past the update it
/// sleeps under a name no waker uses until its own periodic look (about
/// 10 s here) or the end of its wait. queue_wait.rs's test enqueues right
/// after the update, before that look.
#[test]
fn a_consumer_waiting_across_the_update_gets_a_job_enqueued_seconds_after_it() {
    let name = "review_41_wake_after_update";
    let mut c = fresh_db_at_version(name, "0.3.0");
    let mut waiter = connect_to(primary_port(), name, "review-41-late");
    waiter.batch_execute("SELECT * FROM distlock.consume_task('w', '1 minute', NULL, ARRAY['q'])").expect("warm");
    let handle = thread::spawn(move || {
        let got = waiter
            .query("SELECT task_name FROM distlock.consume_task('w', '1 minute', '20 seconds', ARRAY['q'])", &[])
            .map(|rows| rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>())
            .map_err(described);
        (got, Instant::now())
    });
    eventually("the consumer waits", Duration::from_secs(10), || {
        count(&mut c, "SELECT 1 FROM pg_stat_activity WHERE application_name = 'review-41-late' AND wait_event_type = 'Extension'")
            == 1
    });
    c.batch_execute("ALTER EXTENSION pg_distlock UPDATE").expect("update");
    thread::sleep(Duration::from_millis(2500));
    let enqueued = Instant::now();
    c.batch_execute("SELECT distlock.enqueue_task('two-seconds-after', '{}', p_queue => 'q')").expect("enqueue");
    let (got, returned) = handle.join().expect("waiter");
    let took = returned.duration_since(enqueued);
    assert!(
        got == Ok(vec!["two-seconds-after".to_string()]) && took < Duration::from_secs(3),
        "the waiting consumer ended {took:?} after the enqueue with {got:?}"
    );
}
