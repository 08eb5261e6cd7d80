//! Review of the session's change (attempt history, login-role owners, the
//! Python idle check): breaks that need a real cluster. Each fails until it
//! is fixed.

use crate::support::*;

fn history_of(c: &mut Client, job: i64) -> i64 {
    c.query_one("SELECT count(*) FROM distlock.job_attempts WHERE job_id = $1", &[&job]).expect("history").get(0)
}

/// A job of `queue` that failed once (its attempt recorded).
fn failed_once(c: &mut Client, queue: &str) -> i64 {
    let job: i64 = c
        .query_one(&format!("SELECT distlock.enqueue_task('job', p_queue => '{queue}')"), &[])
        .expect("enqueue")
        .get(0);
    c.batch_execute(&format!(
        "SELECT distlock.fail_task(task_id, 'boom', 'w') FROM distlock.consume_task('w', p_queues => ARRAY['{queue}'])"
    ))
    .expect("fail once");
    assert_eq!(history_of(c, job), 1, "the failure is recorded");
    job
}

/// forget_truncated_attempts is an ordinary (ORIGIN) trigger, unlike its
/// neighbour keep_job_ids_unique, which queue.sql enables ALWAYS so that it
/// also fires where session_replication_role is replica (a
/// logical-replication subscriber applying a TRUNCATE). A TRUNCATE applied
/// in replica mode removes the jobs but none of their attempts, and nothing
/// removes those later (ids are never reused, so no job ever claims them):
/// the orphans the trigger exists to prevent, kept for ever.
#[test]
fn review_session_truncate_in_replica_mode_leaves_no_orphaned_attempts() {
    let db = fresh_db("review_session_truncate_replica");
    let mut c = connect(&db);
    let job = failed_once(&mut c, "q");
    c.batch_execute("SET session_replication_role = replica; TRUNCATE distlock.task_queue; \
                     RESET session_replication_role")
        .expect("truncate as a subscriber applies it");
    c.batch_execute("SELECT distlock.prune_jobs('0 seconds')").expect("prune");
    assert_eq!(history_of(&mut c, job), 0, "job {job} is gone but its attempts stay");
}

/// The trigger as the install and the update to 0.4.0 create it: enabled
/// ALWAYS on both tables, as keep_job_ids_unique is on both paths.
#[test]
fn review_session_forget_truncated_attempts_fires_always_after_install_and_update() {
    const MODES: &str = "SELECT string_agg(tgrelid::regclass::text || '=' || tgenabled::text, ',' \
                                    ORDER BY tgrelid::regclass::text) \
                           FROM pg_trigger WHERE tgname = 'forget_truncated_attempts'";
    let mut installed = connect(&fresh_db("review_session_forget_always"));
    let mut updated = fresh_db_at_version("review_session_forget_always_upd", "0.3.0");
    updated.batch_execute("ALTER EXTENSION pg_distlock UPDATE TO '0.4.0'").expect("update");
    let always = Some("distlock.completed_jobs=A,distlock.task_queue=A".to_string());
    assert_eq!(
        (scalar(&mut installed, MODES), scalar(&mut updated, MODES)),
        (always.clone(), always),
        "forget_truncated_attempts skips TRUNCATEs applied in replica mode (install, update)"
    );
}

/// In a SQL_ASCII database (any bytes kept, most often UTF-8: the case
/// owners.rs, owner_names.rs and rate_limit_keys() cut with care) the
/// recorded error is cut with pg_catalog.left(error, 16384), which counts
/// bytes there: a worker's UTF-8 error longer than that is kept cut inside
/// a character, and no UTF-8 client can read the job's history back (every
/// SELECT of the column fails with 22021, the console's job page with it).
#[test]
fn review_session_a_cut_error_in_a_sql_ascii_database_is_readable_by_a_utf8_client() {
    let db = crate::review_owner_marks::db_with_encoding("rvsession_sql_ascii", "SQL_ASCII");
    let mut c = connect(&db);
    let job: i64 = c.query_one("SELECT distlock.enqueue_task('job', p_queue => 'q')", &[]).expect("enqueue").get(0);
    let error = format!("{}é", "x".repeat(16383));
    c.execute(
        "SELECT distlock.fail_task(task_id, $1, 'w') FROM distlock.consume_task('w', p_queues => ARRAY['q'])",
        &[&error],
    )
    .expect("fail with a long UTF-8 error");
    assert_eq!(history_of(&mut c, job), 1, "the failure is recorded");
    let read = c.query_one("SELECT error FROM distlock.job_attempts WHERE job_id = $1", &[&job]);
    let kept: String = read.expect("the recorded error can be read by a UTF-8 client").get(0);
    assert!(error.starts_with(&kept), "what is kept is a prefix of the error");
}
