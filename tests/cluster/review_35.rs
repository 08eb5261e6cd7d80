//! Review 35 (88de7cf..e99fb6c): the takeover text a claim rewrites
//! (queue_consume*.sql), run_task_now's judgement of a session claim
//! (task_run_now.sql), and the count of what a read from the head passed
//! over for good run in a snapshot held from before the claim statement
//! (plans/in_snapshot.rs, queue/claim.rs). Each test failed on e99fb6c.

use std::time::{Duration, Instant};

use crate::run_now::nightly;
use crate::support::*;

fn waits_on(c: &mut Client, pid: i32, event: &str) -> bool {
    count(c, &format!("SELECT FROM pg_stat_activity WHERE pid = {pid} AND wait_event_type = 'Lock' AND wait_event = '{event}'")) == 1
}

/// A session-mode claim that commits while run_task_now's statement runs,
/// after its snapshot and before it locks the task's row (a worker's
/// `try_acquire_task_lock` in a transaction that commits at that moment):
/// the UPDATE re-checks its conditions on the row's latest version
/// (EvalPlanQual), which carries the new claim's token, but the new
/// NOT EXISTS over task_execution_log still reads in the statement's
/// snapshot, which does not see that claim's log row. "No running log row
/// with the current token whose holder holds the lock" is then true, and
/// run_task_now makes the task due while a live claim runs it (before
/// 6a64311 a session claim, with no lease, always counted as live, and the
/// re-check answered false). Here a statement-level trigger holds the
/// statement in that window; without it the window is microseconds wide
/// but just as real.
#[test]
fn run_task_now_is_false_for_a_session_claim_that_commits_while_it_runs() {
    let db = fresh_db("review_35_run_now_race");
    let (mut admin, mut worker, mut stall) = (connect(&db), connect(&db), connect(&db));
    let id = nightly(&mut admin);
    admin
        .batch_execute(
            "CREATE FUNCTION public.review_35_stall() RETURNS trigger LANGUAGE plpgsql AS
               $$BEGIN
                   IF pg_catalog.current_setting('review35.stall', true) = 'on' THEN
                       PERFORM pg_catalog.pg_advisory_xact_lock(3535);
                   END IF;
                   RETURN NULL;
                 END$$;
             CREATE TRIGGER review_35_stall BEFORE UPDATE ON distlock.scheduled_tasks
               FOR EACH STATEMENT EXECUTE FUNCTION public.review_35_stall();
             SET review35.stall = 'on'",
        )
        .expect("a stall between run_task_now's snapshot and its row lock");
    worker.batch_execute(&format!("BEGIN; SELECT distlock.try_acquire_task_lock({id}, 'w')")).expect("a claim, uncommitted");
    stall.batch_execute("SELECT pg_advisory_lock(3535)").expect("hold the stall");
    let admin_pid = backend_pid(&mut admin);
    let run_now = std::thread::spawn(move || {
        let answer: bool = admin.query_one(&format!("SELECT distlock.run_task_now({id})"), &[]).expect("run now").get(0);
        answer
    });
    // Since the fix run_task_now locks the row first (SKIP LOCKED: the
    // uncommitted claim holds it) and answers at once, never reaching the
    // UPDATE; the stall is kept to show the window closed either way.
    eventually("run_task_now to stall in the trigger or answer", Duration::from_secs(10), || {
        run_now.is_finished() || waits_on(&mut stall, admin_pid, "advisory")
    });
    worker.batch_execute("COMMIT").expect("the claim commits");
    stall.batch_execute("SELECT pg_advisory_unlock(3535)").expect("free the stall");
    let answer = run_now.join().expect("run_task_now");
    let alive = count(&mut stall, &format!("SELECT FROM distlock.running_tasks WHERE task_id = {id} AND holder_alive"));
    let next: String = scalar(&mut stall, &format!("SELECT next_run_at > clock_timestamp() FROM distlock.scheduled_tasks WHERE id = {id}"))
        .unwrap_or_default();
    assert_eq!(alive, 1, "the worker's session claim is live: its backend holds the task lock");
    assert!(
        !answer,
        "run_task_now answered true (next_run_at in the future: {next}) while a live session claim runs the task: it \
         re-checked the row's latest version, with the new claim's token, against task_execution_log in its older \
         snapshot, where that claim's log row is not yet"
    );
}

/// review_46_9's "jobs committed ahead of the claim" the other way round,
/// through a wait: the snapshot the count runs in (HeldSnapshot::now in
/// claim.rs) is taken before the claim statement's plan takes its table
/// locks, and the claim's own snapshot after. A claim queued behind DDL
/// (here LOCK TABLE ... IN SHARE MODE, standing for CREATE INDEX, ALTER
/// TABLE, VACUUM FULL, ALTER EXTENSION UPDATE), which itself waits for an
/// open transaction, waits between the two for as long as that lasts, not
/// the "microseconds" docs/design/queue-storage.md allows for. Here the
/// open transaction is a consumer holding 50,000 claimed jobs of priority
/// 10; it commits during the wait. The claim does not see those jobs
/// (their runnable versions are dead to it) and passes over the 50,000 jobs
/// of a paused queue before its own; the count, in the older snapshot,
/// finds the 50,000 held jobs runnable and first, none of a paused queue,
/// and counts nothing as passed over for good. Once the held jobs' horizon
/// has passed, the next read from the head comes a second later over the
/// whole paused backlog instead of 10 s later. (Before e99fb6c the count
/// ran after the claim and counted the paused backlog right.) The control
/// is the same holder committing before the claim.
#[test]
fn a_read_from_the_head_queued_behind_ddl_still_counts_the_paused_backlog() {
    let mut result: Vec<(&str, i64)> = Vec::new();
    for commit_during_the_wait in [false, true] {
        let name = if commit_during_the_wait { "review_35_wait_during" } else { "review_35_wait_before" };
        let db = fresh_db(name);
        let (mut admin, mut holder) = (connect(&db), connect(&db));
        // A consumer of every queue whose claim statement is prepared and
        // who keeps no start (its first claim found nothing): its next
        // claim reads from the head, and takes its first lock on the queue
        // table in the claim statement.
        let mut consumer = connect(&db);
        let none = scalar(&mut consumer, "SELECT (SELECT task_id FROM distlock.consume_task('c'))");
        assert_eq!(none, None, "{name}: nothing to claim yet");
        crate::review_46_8::paused_backlog_and_an_open_claim_of_50_000(&mut admin, &mut holder);
        let mine = crate::review_46_7::enqueue(&mut admin, "q", "now() - interval '1 hour'", 0);
        let claimed = if commit_during_the_wait {
            let mut locker = connect(&db);
            let locker_pid = backend_pid(&mut locker);
            let lock = std::thread::spawn(move || {
                locker.batch_execute("BEGIN; LOCK TABLE distlock.task_queue IN SHARE MODE; COMMIT").expect("lock table");
            });
            eventually("the LOCK TABLE to queue behind the holder", Duration::from_secs(10), || {
                waits_on(&mut admin, locker_pid, "relation")
            });
            let consumer_pid = backend_pid(&mut consumer);
            let claim = std::thread::spawn(move || {
                let job: Option<i64> = consumer
                    .query_one("SELECT (SELECT task_id FROM distlock.consume_tasks(1, 'c'))", &[])
                    .expect("claim")
                    .get(0);
                (consumer, job)
            });
            eventually("the claim to queue behind the LOCK TABLE", Duration::from_secs(10), || {
                waits_on(&mut admin, consumer_pid, "relation")
            });
            holder.batch_execute("COMMIT").expect("the holder commits during the wait");
            lock.join().expect("lock table");
            let (back, job) = claim.join().expect("the claim");
            consumer = back;
            job
        } else {
            holder.batch_execute("COMMIT").expect("the holder commits before the claim");
            scalar(&mut consumer, "SELECT (SELECT task_id FROM distlock.consume_tasks(1, 'c'))").map(|id| id.parse().expect("id"))
        };
        assert_eq!(claimed, Some(mine), "{name}: the read from the head");
        let head_read_at = Instant::now();
        let reads = crate::review_46_9::one_job_claims_for_4_s(&mut admin, &mut consumer, "c", name, head_read_at);
        // The first claim after may step once over the dead entries of the
        // held jobs (priority 10, ahead of the place): when the holder
        // committed during the wait, the read from the head's own outer
        // snapshot kept them from being marked dead. After it, a read over
        // the paused backlog is one from the head, due 10 s after the last.
        result.push((name, reads[1..].iter().copied().max().unwrap_or(0)));
    }
    for (name, most) in result {
        assert!(
            most < 25_000,
            "{name}: a one-job claim within 4 s of the read from the head (after the first) read {most} runnable index \
             entries: another read from the head over the 50,000 paused jobs. With the holder committing while the \
             claim waited behind LOCK TABLE, the count ran in a snapshot from before the wait, took the 50,000 held jobs \
             for what the read passed over and counted the paused backlog as nothing lasting"
        );
    }
}

/// The same race without a stall: a worker claims and releases the task in
/// a loop (each claim and each release committed at once), and an admin
/// asks run_task_now meanwhile, each answer in a transaction rolled back.
/// An answer true whose own row version carries a session claim's token,
/// whose log row is running and whose backend holds the task lock, was
/// given while a live claim ran the task.
#[test]
fn run_task_now_never_makes_due_a_task_a_live_session_claim_runs() {
    let db = fresh_db("review_35_run_now_loop");
    let (mut admin, mut worker) = (connect(&db), connect(&db));
    let id = nightly(&mut admin);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop_worker = stop.clone();
    let cycles = std::thread::spawn(move || {
        let mut cycles = 0u64;
        while !stop_worker.load(std::sync::atomic::Ordering::Relaxed) {
            let claimed: bool =
                worker.query_one(&format!("SELECT distlock.try_acquire_task_lock({id}, 'w')"), &[]).expect("claim").get(0);
            if claimed {
                worker.batch_execute(&format!("SELECT distlock.release_task_lock({id}, 'w', 'completed')")).expect("release");
                cycles += 1;
            }
        }
        cycles
    });
    let started = Instant::now();
    let (mut asked, mut wrong) = (0u64, Vec::new());
    while started.elapsed() < Duration::from_secs(10) && wrong.is_empty() {
        admin.batch_execute("BEGIN").expect("begin");
        let answer: bool = admin.query_one(&format!("SELECT distlock.run_task_now({id})"), &[]).expect("run now").get(0);
        asked += 1;
        if answer {
            let live = count(
                &mut admin,
                &format!(
                    "SELECT FROM distlock.scheduled_tasks t
                       JOIN distlock.task_execution_log r ON r.task_id = t.id AND r.fencing_token = t.current_token
                       JOIN distlock.task_lock_holders h ON h.task_id = t.id AND h.pid = r.holder_pid
                      WHERE t.id = {id} AND t.lease_expires_at IS NULL AND r.status = 'running'"
                ),
            );
            if live > 0 {
                wrong.push(asked);
            }
        }
        admin.batch_execute("ROLLBACK").expect("rollback");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let cycles = cycles.join().expect("worker");
    eprintln!("{asked} answers in {:?}, {cycles} claim-release cycles; wrong answers at {wrong:?}", started.elapsed());
    assert!(wrong.is_empty(), "run_task_now answered true while a live session claim ran the task (answer {wrong:?} of {asked})");
}
