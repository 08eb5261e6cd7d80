//! Review of the attempt history (distlock.job_attempts, branch
//! attempt-history): breaks that need a real cluster (TRUNCATE, a second
//! connection). Each fails until it is fixed.

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

/// TRUNCATE distlock.task_queue (which queue.sql's keep_job_ids_unique
/// makes safe for ids) removes every queued job but none of their attempts,
/// and nothing removes those later: prune_jobs, delete_dead_jobs and
/// purge_queue delete attempts only through the jobs they delete. The
/// history table keeps rows of jobs that no longer exist, for ever.
#[test]
fn review_attempts_truncate_of_the_queue_leaves_no_orphaned_attempts() {
    let db = fresh_db("review_attempts_truncate_queue");
    let mut c = connect(&db);
    let job = failed_once(&mut c, "q");
    c.batch_execute("TRUNCATE distlock.task_queue").expect("truncate");
    c.batch_execute("SELECT distlock.prune_jobs('0 seconds')").expect("prune");
    assert_eq!(history_of(&mut c, job), 0, "job {job} is gone but its attempts stay");
}

/// The same for TRUNCATE distlock.completed_jobs: a job that failed, then
/// completed (archived), then had its archive truncated keeps its attempts.
#[test]
fn review_attempts_truncate_of_completed_jobs_leaves_no_orphaned_attempts() {
    let db = fresh_db("review_attempts_truncate_completed");
    let mut c = connect(&db);
    let job = failed_once(&mut c, "q");
    c.batch_execute(&format!("UPDATE distlock.task_queue SET run_after = now() - interval '1 second' WHERE id = {job}"))
        .expect("due now");
    // Claimed on a new connection, which starts from the head of the claim
    // index (a change by hand puts the job behind where c's claims start).
    connect(&db)
        .batch_execute("SELECT distlock.complete_task(task_id, 'w') FROM distlock.consume_task('w', p_queues => ARRAY['q'])")
        .expect("retried and completed");
    assert_eq!(
        scalar(&mut c, &format!("SELECT count(*) FROM distlock.completed_jobs WHERE id = {job}")),
        Some("1".into())
    );
    c.batch_execute("TRUNCATE distlock.completed_jobs").expect("truncate");
    c.batch_execute("SELECT distlock.prune_jobs('0 seconds')").expect("prune");
    assert_eq!(history_of(&mut c, job), 0, "job {job} is gone but its attempts stay");
}

/// Every claim statement writes job_attempts (when it takes a lease over),
/// so a lock on the history stronger than ROW EXCLUSIVE holds claims, as
/// one on task_queue does (docs/queue.md). The claim takes that lock with
/// its other tables before its snapshot (lock_claim_tables): a claim that
/// waited for it claims a job committed while it waited.
#[test]
fn review_attempts_a_claim_held_by_a_lock_on_the_history_claims_what_was_committed_meanwhile() {
    let db = fresh_db("review_attempts_history_ddl");
    let mut holder = connect(&db);
    let mut producer = connect(&db);
    holder.batch_execute("BEGIN; LOCK TABLE distlock.job_attempts IN SHARE MODE").expect("lock the history");
    let claiming_db = db.clone();
    let claim = std::thread::spawn(move || {
        let mut consumer = connect(&claiming_db);
        consumer
            .query_one("SELECT pg_catalog.array_agg(task_id) FROM distlock.consume_task('w', p_queues => ARRAY['q'])", &[])
            .map(|row| row.get::<_, Option<Vec<i64>>>(0))
    });
    eventually("the claim to wait for the history's lock", std::time::Duration::from_secs(10), || {
        scalar(
            &mut producer,
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'distlock.job_attempts'::regclass",
        ) == Some("1".into())
    });
    let job: i64 = producer
        .query_one("SELECT distlock.enqueue_task('job', p_queue => 'q')", &[])
        .expect("enqueue")
        .get(0);
    holder.batch_execute("ROLLBACK").expect("release the history");
    let claimed = claim.join().expect("claim thread").expect("claim");
    assert_eq!(claimed, Some(vec![job]), "the claim that waited missed job {job}, committed while it waited");
}
