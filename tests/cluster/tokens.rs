//! Tokens only rise: for every primitive that hands out a fencing token or
//! a term, a grant that comes after another gets a larger number, however
//! many contenders race for it.
//!
//! Holds are exclusive, so each holder records its token in `grants` while
//! it holds (the bigserial `seq` is drawn during the hold): ordering by
//! `seq` orders the grants in time, and the tokens must rise in that order.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

const CONTENDERS: usize = 16;

/// Runs CONTENDERS connections for at least `run_for`; each loops:
/// `acquire` (its first column is the token, NULL when not granted), record,
/// `release`. `$me` in the statements is the contender's name. A slow or busy
/// machine grants less in `run_for`, so the race goes on (up to a minute)
/// until it has the grants `assert_tokens_rise` needs to mean something.
fn race(db: &str, run_for: Duration, acquire: &'static str, release: &'static str) {
    connect(db)
        .batch_execute("CREATE TABLE grants (seq bigserial PRIMARY KEY, holder text, token bigint)")
        .expect("grants table");
    let started = Instant::now();
    let at_least_until = started + run_for;
    let at_most_until = started + Duration::from_secs(60);
    let grants = Arc::new(AtomicUsize::new(0));
    let holders = Arc::new(Mutex::new(HashSet::new()));
    let contenders: Vec<_> = (0..CONTENDERS)
        .map(|i| {
            let db = db.to_string();
            let grants = Arc::clone(&grants);
            let holders = Arc::clone(&holders);
            thread::spawn(move || {
                let me = format!("contender-{i}");
                let mut c = connect_to(primary_port(), &db, &me);
                let enough = || {
                    grants.load(Ordering::SeqCst) >= 2 * ENOUGH_GRANTS as usize
                        && holders.lock().expect("holders").len() >= ENOUGH_HOLDERS
                };
                loop {
                    let now = Instant::now();
                    if now >= at_most_until || (now >= at_least_until && enough()) {
                        break;
                    }
                    let Some(token) = scalar(&mut c, &acquire.replace("$me", &me)) else {
                        continue;
                    };
                    c.batch_execute(&format!("INSERT INTO grants (holder, token) VALUES ('{me}', {token})"))
                        .expect("record the grant");
                    c.batch_execute(&release.replace("$me", &me).replace("$token", &token)).expect("release");
                    grants.fetch_add(1, Ordering::SeqCst);
                    holders.lock().expect("holders").insert(i);
                }
            })
        })
        .collect();
    for c in contenders {
        c.join().expect("contender");
    }
}

const ENOUGH_GRANTS: i64 = 100;
const ENOUGH_HOLDERS: usize = 4;

fn assert_tokens_rise(db: &str) {
    let mut c = connect(db);
    let grants = count(&mut c, "SELECT 1 FROM grants");
    let holders = count(&mut c, "SELECT DISTINCT holder FROM grants");
    assert!(grants >= ENOUGH_GRANTS && holders >= ENOUGH_HOLDERS as i64, "enough contended grants to mean something ({grants} by {holders})");
    let backwards = scalar(
        &mut c,
        "SELECT string_agg(format('%s then %s', prev, token), ', ') FROM ( \
           SELECT token, lag(token) OVER (ORDER BY seq) AS prev FROM grants) g WHERE token <= prev",
    );
    assert_eq!(backwards, None, "a later grant got a smaller or equal token");
}

#[test]
fn lease_tokens_rise_with_every_grant() {
    let db = fresh_db("tokens_lease");
    race(
        &db,
        Duration::from_secs(3),
        "SELECT distlock.acquire_lease('hot', '$me', '1 hour')",
        "SELECT distlock.release_lease('hot', '$me')",
    );
    assert_tokens_rise(&db);
}

#[test]
fn election_terms_rise_with_every_leader() {
    let db = fresh_db("tokens_election");
    race(
        &db,
        Duration::from_secs(3),
        "SELECT term FROM distlock.try_become_leader('hot', '$me', '1 hour') WHERE is_leader",
        "SELECT distlock.resign_leader('hot', '$me')",
    );
    assert_tokens_rise(&db);
}

#[test]
fn task_fencing_tokens_rise_with_every_session_claim() {
    let db = fresh_db("tokens_task_session");
    // The token is read after the claim, in a statement of its own (a
    // statement's snapshot would not see its own call's claim).
    connect(&db)
        .batch_execute(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type) VALUES ('hot', 'report'); \
             CREATE FUNCTION claim_hot(me text) RETURNS bigint LANGUAGE plpgsql AS $$ BEGIN \
               IF distlock.try_acquire_task_lock(1, me) THEN \
                 RETURN (SELECT current_token FROM distlock.scheduled_tasks WHERE id = 1); \
               END IF; \
               RETURN NULL; END $$;",
        )
        .expect("task");
    race(
        &db,
        Duration::from_secs(3),
        "SELECT claim_hot('$me')",
        "SELECT distlock.release_task_lock(1, '$me', 'completed')",
    );
    assert_tokens_rise(&db);
}

#[test]
fn task_fencing_tokens_rise_with_every_lease_claim() {
    let db = fresh_db("tokens_task_lease");
    connect(&db)
        .batch_execute("INSERT INTO distlock.scheduled_tasks (task_name, task_type) VALUES ('hot', 'report')")
        .expect("task");
    race(
        &db,
        Duration::from_secs(3),
        "SELECT distlock.try_acquire_task_lease(1, '$me', '1 hour')",
        "SELECT distlock.release_task_lease(1, $token, 'completed')",
    );
    assert_tokens_rise(&db);
}
