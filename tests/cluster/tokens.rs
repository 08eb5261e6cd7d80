//! Tokens only rise: for every primitive that hands out a fencing token or
//! a term, a grant that comes after another gets a larger number, however
//! many contenders race for it.
//!
//! Holds are exclusive, so each holder records its token in `grants` while
//! it holds (the bigserial `seq` is drawn during the hold): ordering by
//! `seq` orders the grants in time, and the tokens must rise in that order.

use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

const CONTENDERS: usize = 16;

/// Runs CONTENDERS connections for `run_for`; each loops: `acquire` (its
/// first column is the token, NULL when not granted), record, `release`.
/// `$me` in the statements is the contender's name.
fn race(db: &str, run_for: Duration, acquire: &'static str, release: &'static str) {
    connect(db)
        .batch_execute("CREATE TABLE grants (seq bigserial PRIMARY KEY, holder text, token bigint)")
        .expect("grants table");
    let until = Instant::now() + run_for;
    let contenders: Vec<_> = (0..CONTENDERS)
        .map(|i| {
            let db = db.to_string();
            thread::spawn(move || {
                let me = format!("contender-{i}");
                let mut c = connect_to(primary_port(), &db, &me);
                while Instant::now() < until {
                    let Some(token) = scalar(&mut c, &acquire.replace("$me", &me)) else {
                        continue;
                    };
                    c.batch_execute(&format!("INSERT INTO grants (holder, token) VALUES ('{me}', {token})"))
                        .expect("record the grant");
                    c.batch_execute(&release.replace("$me", &me).replace("$token", &token)).expect("release");
                }
            })
        })
        .collect();
    for c in contenders {
        c.join().expect("contender");
    }
}

fn assert_tokens_rise(db: &str) {
    let mut c = connect(db);
    let grants = count(&mut c, "SELECT 1 FROM grants");
    let holders = count(&mut c, "SELECT DISTINCT holder FROM grants");
    assert!(grants >= 100 && holders >= 4, "enough contended grants to mean something ({grants} by {holders})");
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
