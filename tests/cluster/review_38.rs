//! Review 38 (742088c..0106e18): run_task_now's judgement of a session-mode
//! claim by pg_locks (src/tasks/run_now.rs, sql/queries/task_lock_held.sql).
//! NOT RUN: the review was read-only (a CI run had the machine); each test
//! is expected to fail on 0106e18. See /tmp/review38.md.

use std::time::Duration;

use crate::run_now::nightly;
use crate::support::*;

/// task_lock_held.sql asks whether *any* backend holds the task's lock,
/// "either tag": the legacy tag (objsubid 2) is the one
/// `pg_advisory_lock(int, int)` reaches, so a role with no capability at all
/// that holds `pg_advisory_lock(1684824939, <task id>)` (lock_tags.rs: "a
/// session holding a task key from SQL blocks nothing"; legacy.rs: "a
/// session squatting on the key ... blocks nothing") makes every session
/// claim of that task look alive. After the claim's backend died,
/// run_task_now answers false ("a claim runs it") for as long as the
/// squatter stays, while nothing runs the task and claims themselves are
/// not blocked. legacy_claim_alive.sql already asks the right question (a
/// running log row whose holder_pid holds one of the task's locks), or the
/// claim's own lock (25709, the token's low bits) says which claim is alive.
#[test]
fn run_task_now_after_a_session_claims_backend_died_is_not_blocked_by_a_squatter_on_the_old_key() {
    let db = fresh_db("review_38_run_now_squatter");
    let (mut admin, mut worker) = (connect(&db), connect(&db));
    let id = nightly(&mut admin);
    admin
        .batch_execute("DROP ROLE IF EXISTS review_38_squatter; CREATE ROLE review_38_squatter LOGIN")
        .expect("a role with no capability");
    let mut squatter = connect(&db);
    squatter
        .batch_execute(&format!("SET ROLE review_38_squatter; SELECT pg_advisory_lock(1684824939, {id})"))
        .expect("the task's 0.2.0 key, from SQL");
    let claimed: bool =
        worker.query_one(&format!("SELECT distlock.try_acquire_task_lock({id}, 'w')"), &[]).expect("claim").get(0);
    assert!(claimed, "a squatter blocks no claim");
    let pid = backend_pid(&mut worker);
    admin.batch_execute(&format!("SELECT pg_terminate_backend({pid})")).expect("terminate");
    eventually("the holder to be gone", Duration::from_secs(5), || {
        count(&mut admin, &format!("SELECT 1 FROM pg_stat_activity WHERE pid = {pid}")) == 0
    });
    let answer: bool = admin.query_one(&format!("SELECT distlock.run_task_now({id})"), &[]).expect("run now").get(0);
    let squatting = count(&mut admin, &format!("SELECT 1 FROM distlock.task_lock_holders WHERE task_id = {id}"));
    assert!(
        answer,
        "run_task_now answered false for a task whose session claim died, because a role with no capability holds the \
         task's 0.2.0 key with pg_advisory_lock(int, int) ({squatting} holder(s) in task_lock_holders): \
         task_lock_held.sql asks whether someone holds the lock, not whether the claim's holder does"
    );
}
