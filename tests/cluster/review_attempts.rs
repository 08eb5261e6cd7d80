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
    c.batch_execute(&format!(
        "UPDATE distlock.task_queue SET run_after = now() - interval '1 second' WHERE id = {job}; \
         SELECT distlock.complete_task(task_id, 'w') FROM distlock.consume_task('w', p_queues => ARRAY['q'])"
    ))
    .expect("retried and completed");
    assert_eq!(
        scalar(&mut c, &format!("SELECT count(*) FROM distlock.completed_jobs WHERE id = {job}")),
        Some("1".into())
    );
    c.batch_execute("TRUNCATE distlock.completed_jobs").expect("truncate");
    c.batch_execute("SELECT distlock.prune_jobs('0 seconds')").expect("prune");
    assert_eq!(history_of(&mut c, job), 0, "job {job} is gone but its attempts stay");
}

/// Every claim statement carries the INSERT into job_attempts, so a lock
/// on the history table that conflicts with RowExclusiveLock (CREATE INDEX
/// on ended_at for a console page, VACUUM FULL after a large prune,
/// CLUSTER, LOCK ... IN SHARE MODE) stops every consumer, even those whose
/// claim takes over no expired lease and records nothing. (complete_task,
/// which never records, goes through.)
#[test]
fn review_attempts_a_lock_on_the_history_does_not_stop_claims_without_takeover() {
    let db = fresh_db("review_attempts_history_ddl");
    let mut holder = connect(&db);
    let mut consumer = connect(&db);
    consumer
        .batch_execute("SELECT distlock.enqueue_task('job', p_queue => 'q'); SELECT distlock.enqueue_task('job')")
        .expect("enqueue");
    holder.batch_execute("BEGIN; LOCK TABLE distlock.job_attempts IN SHARE MODE").expect("lock the history");
    consumer.batch_execute("SET lock_timeout = '2s'").expect("lock_timeout");
    let named = consumer.simple_query("SELECT task_id FROM distlock.consume_task('w', p_queues => ARRAY['q'])");
    let every = consumer.simple_query("SELECT task_id FROM distlock.consume_task('w')");
    holder.batch_execute("ROLLBACK").expect("rollback");
    assert!(named.is_ok(), "a named queue's claim with no takeover waited for the history: {:?}", named.err());
    assert!(every.is_ok(), "an every-queue claim with no takeover waited for the history: {:?}", every.err());
}
