//! Queues named by scopes, as a fresh-eyes review attacked them (issue 44,
//! items 4 and 7, after b1aefbb): each test failed there.

use std::thread;
use std::time::Duration;

use crate::scopes::two_tenants;
use crate::support::*;

/// Wake-ups commits have sent to waiting consumers since the server started.
fn wakeups(c: &mut Client) -> i64 {
    scalar(c, "SELECT wakeups FROM distlock.queue_wait_stats()").expect("shared memory").parse().expect("wakeups")
}

/// A consumer of `role` waiting (up to 60 s) in the server for a job of
/// `queues` (an SQL text[] expression; NULL: every queue in its scope).
struct Waiter {
    pid: i32,
    handle: thread::JoinHandle<Result<Vec<String>, postgres::Error>>,
}

fn wait_as(db: &str, role: &str, worker: &str, queues: &str) -> Waiter {
    let mut w = connect_to(primary_port(), db, worker);
    w.batch_execute(&format!("SET ROLE {role}")).expect("set role");
    let pid = backend_pid(&mut w);
    let sql = format!(
        "SELECT task_name FROM distlock.consume_task('{worker}', '1 hour', '60 seconds', p_queues => {queues})"
    );
    let handle =
        thread::spawn(move || w.query(&sql, &[]).map(|rows| rows.iter().map(|r| r.get::<_, String>(0)).collect()));
    let mut watcher = connect_to(primary_port(), db, "watcher");
    eventually(&format!("{worker} to sleep in the server"), Duration::from_secs(10), || {
        count(&mut watcher, &format!("SELECT 1 FROM pg_stat_activity WHERE pid = {pid} AND wait_event_type = 'Extension'"))
            == 1
    });
    Waiter { pid, handle }
}

/// Cancels the waiter; the jobs it got (none when it was still waiting).
fn stop(c: &mut Client, waiter: Waiter) -> Vec<String> {
    c.batch_execute(&format!("SELECT pg_cancel_backend({})", waiter.pid)).expect("cancel");
    match waiter.handle.join().expect("waiter thread") {
        Ok(names) => names,
        Err(e) => {
            assert_eq!(e.code().map(|c| c.code()), Some("57014"), "{e:?}");
            Vec::new()
        }
    }
}

/// Runs `sql` as `role` 300 times, 10 ms apart (about 3.5 s).
fn three_hundred_times(c: &mut Client, role: &str, sql: &str) {
    as_role(c, role, |c| {
        for _ in 0..300 {
            c.batch_execute(sql).unwrap_or_else(|e| panic!("{sql}: {e:?}"));
            thread::sleep(Duration::from_millis(10));
        }
    });
}

/// Sleepers and the runnable log name a queue by an unkeyed 32-bit FNV-1a
/// hash (wake::queue_hash), so a tenant can choose a queue name in its own
/// scope that lands on another tenant's queue: "No name can be chosen to
/// land on another's" holds for the rate-limit table and the turn locks but
/// not here. Before b1aefbb B could enqueue into 'a.q' itself; now it cannot,
/// but with 'b.esjd6uy' (found offline in 8 s by brute force,
/// /tmp/review4/fnv/f.c: 2 + 7 chars of [a-z0-9]) its enqueues into its own
/// queue still wake every waiting consumer of A's 'a.q' (and move where A's
/// claims start, through the runnable log).
///
/// Repro (/tmp/review4/repro_wake.sh):
///   -- session 2: SET ROLE ta; SELECT count(*) FROM distlock.consume_task(
///   --   'wa', '1 hour', '20 seconds', p_queues => ARRAY['a.q']);
///   -- session 3, 300 times 10 ms apart: SET ROLE tb;
///   --   SELECT distlock.enqueue_task('b.job', '{}', p_queue => 'b.esjd6uy');
///   => wakeups sent: 301, A's backend 12 CPU ticks; into 'b.q' instead: 0 and 0.
///   With pgbench (4 clients, 5.5k tps) into 'b.esjd6uy': A's waiter used
///   212 CPU ticks in 7 s (0 for 'b.q').
#[test]
fn a_queue_name_chosen_by_another_tenant_does_not_wake_a_tenants_consumers() {
    fn fnv1a(name: &[u8]) -> u32 {
        name.iter().fold(0x811c_9dc5_u32, |h, b| (h ^ *b as u32).wrapping_mul(0x0100_0193)).max(1)
    }
    assert_eq!(fnv1a(b"a.q"), fnv1a(b"b.esjd6uy"), "the collision this test relies on");
    let name = "queue_scopes_wake_collision";
    let (mut c, a, b) = two_tenants(name, &["producer", "consumer"]);
    let waiter = wait_as(name, &a, "wa", "ARRAY['a.q']");
    let before = wakeups(&mut c);
    three_hundred_times(&mut c, &b, "SELECT distlock.enqueue_task('b.job', '{}', p_queue => 'b.esjd6uy')");
    let woken = wakeups(&mut c) - before;
    let got = stop(&mut c, waiter);
    assert!(got.is_empty(), "A took {got:?}");
    assert!(woken <= 10, "B's 300 jobs in B's queue 'b.esjd6uy' woke A's consumer of 'a.q' {woken} times");
}

/// "Completing, failing or extending a job outside the caller's consumer
/// scope answers exactly as an unknown id (P0002)": claims now keep to jobs
/// whose name AND queue are in the scope, but the settle paths
/// (settle::require_job_in_scope, ids_in_scope) still look at the name
/// only. A job named in A's scope in B's queue (an unscoped producer put it
/// there; A can never claim it) answers A with false, an unknown id with
/// P0002: A learns which ids exist in B's queue.
///
/// Repro (db r1, roles ta 'a.' / tb 'b.', producer, consumer, monitor):
///   SELECT distlock.enqueue_task('a.stray','{}', p_queue=>'b.q');   -- 2
///   SELECT distlock.enqueue_task('b.inA','{}', p_queue=>'a.q');     -- 3
///   SET ROLE ta;
///   SELECT distlock.complete_task(2, 'wa');   => f
///   SELECT distlock.complete_task(3, 'wa');   => ERROR: job 3 does not exist
///   SELECT distlock.complete_task(999, 'wa'); => ERROR: job 999 does not exist
///   SELECT distlock.extend_task_lease(2, '1 hour', 'wa'); => f
///   SELECT distlock.fail_task(2, 'x', 'wa');  => f
#[test]
fn settling_a_job_of_another_tenants_queue_answers_as_an_unknown_id() {
    let (mut c, a, _b) = two_tenants("queue_scopes_settle", &["producer", "consumer"]);
    let stray: i64 = scalar(&mut c, "SELECT distlock.enqueue_task('a.stray', '{}', p_queue => 'b.q')")
        .expect("an unscoped producer's job named in A's scope, in B's queue")
        .parse()
        .expect("id");
    let unknown = stray + 1000;
    for template in [
        "SELECT distlock.complete_task(JOB, 'wa')",
        "SELECT distlock.fail_task(JOB, 'boom', 'wa')",
        "SELECT distlock.extend_task_lease(JOB, '1 hour', 'wa')",
    ] {
        let answer = |c: &mut Client, job: i64| -> String {
            let sql = template.replace("JOB", &job.to_string());
            match as_role(c, &a, |c| c.simple_query(&sql)) {
                Ok(_) => "ok".into(),
                Err(e) => e.code().map(|c| c.code().to_string()).unwrap_or_default(),
            }
        };
        assert_eq!(answer(&mut c, unknown), "P0002", "{template}: an unknown id");
        assert_eq!(answer(&mut c, stray), "P0002", "{template}: a job of B's queue answers A unlike an unknown id");
    }
}

/// A database on 0.3.0's SQL (this library serves it until ALTER EXTENSION
/// UPDATE: preloaded, from the restart that loads it) with role
/// `{name}_a` holding producer and consumer scoped to `a.`.
fn tenant_on_0_3_0(name: &str) -> (Client, String) {
    let mut c = fresh_db_at_version(name, "0.3.0");
    let role = format!("{name}_a");
    c.batch_execute(&format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role};
         SELECT distlock.grant_capability('{role}', c, 'a.') FROM unnest(ARRAY['producer', 'consumer']) c"
    ))
    .expect("a tenant scoped to a.");
    (c, role)
}

/// In 0.3.0 a scope covered job names only: a scoped consumer with
/// `p_queues` NULL took its tenant's jobs from `default`, where scoped
/// producers put them unless they named a queue. After 5bff0dd a settle
/// also requires the job's QUEUE in the caller's scope, so a job the tenant
/// holds across the update (claimed by 0.3.0's library, or before the
/// restart that loads this one) can no longer be completed, failed or
/// extended by its own consumer: it answers "job N does not exist" (P0002)
/// for a job that exists, is named in the caller's scope and is held by the
/// caller's worker. The job then runs again when its lease ends, and only
/// unscoped consumers take it. The batch settles drop it silently
/// (complete_tasks returns nothing, settle_and_consume_tasks says
/// 'refused', as for a lost lease). docs/upgrading.md's UPDATE moving a
/// tenant's jobs out of `default` leaves these out (`status <> 'processing'`).
/// At b1aefbb (name-only check) each settle below succeeded; since, a
/// consumer may settle a job it holds whatever its queue.
///
/// The 0.3.0 library is not needed to reach the state: the tenant's claim is
/// made in its own queue and then put where 0.3.0 left such jobs, by hand.
///
/// Repro (PG 15, preloaded, db r4, role r5d scoped 'a.' producer+consumer):
///   CREATE EXTENSION pg_distlock VERSION '0.3.0';
///   SET ROLE r5d;
///   SELECT distlock.enqueue_task('a.one','{}', p_queue => 'a.q');  -- 1
///   SELECT distlock.enqueue_task('a.two','{}', p_queue => 'a.q');  -- 2
///   SELECT task_id, task_name FROM distlock.consume_tasks(2, 'wa', '1 hour', p_queues => ARRAY['a.q']);
///   RESET ROLE;
///   UPDATE distlock.task_queue SET queue = 'default';   -- as 0.3.0 left them
///   SET ROLE r5d;
///   SELECT distlock.complete_task(1, 'wa');             => ERROR:  job 1 does not exist
///   SELECT * FROM distlock.complete_tasks(ARRAY[1,2]::bigint[], 'wa');   => (0 rows)
///   RESET ROLE; ALTER EXTENSION pg_distlock UPDATE; SET ROLE r5d;
///   SELECT distlock.complete_task(1, 'wa');             => ERROR:  job 1 does not exist
///   SELECT task_id, outcome FROM distlock.settle_and_consume_tasks(1, 'wa',
///       p_completed => ARRAY[1,2]::bigint[], p_queues => ARRAY['a.q']);  => 1|refused, 2|refused
///   => both jobs stay 'processing' in 'default' with worker 'wa'.
#[test]
fn a_job_a_scoped_consumer_claimed_in_default_before_the_update_can_still_be_settled() {
    let name = "queue_scopes_default_claims";
    let (mut c, a) = tenant_on_0_3_0(name);
    let claimed: Vec<i64> = as_role(&mut c, &a, |c| {
        c.batch_execute(
            "SELECT distlock.enqueue_task('a.one', '{}', p_queue => 'a.q');
             SELECT distlock.enqueue_task('a.two', '{}', p_queue => 'a.q');
             SELECT distlock.enqueue_task('a.three', '{}', p_queue => 'a.q')",
        )
        .expect("the tenant's jobs");
        c.query("SELECT task_id FROM distlock.consume_tasks(3, 'wa', '1 hour', p_queues => ARRAY['a.q']) ORDER BY 1", &[])
            .expect("claimed")
            .iter()
            .map(|r| r.get(0))
            .collect()
    });
    assert_eq!(claimed.len(), 3);
    // Where 0.3.0 left a scoped consumer's jobs.
    c.batch_execute("UPDATE distlock.task_queue SET queue = 'default'").expect("as 0.3.0 left them");

    let (one, two, three) = (claimed[0], claimed[1], claimed[2]);
    let settle = |c: &mut Client, sql: String| -> String {
        as_role(c, &a, |c| match c.query_one(&sql, &[]) {
            Ok(row) => row.get::<_, bool>(0).to_string(),
            Err(e) => e.code().map(|c| c.code().to_string()).unwrap_or_else(|| e.to_string()),
        })
    };
    // On 0.3.0's SQL, served by this library (the window between the
    // restart and ALTER EXTENSION UPDATE).
    assert_eq!(settle(&mut c, format!("SELECT distlock.extend_task_lease({one}, '1 hour', 'wa')")), "true");
    assert_eq!(settle(&mut c, format!("SELECT distlock.complete_task({one}, 'wa')")), "true");
    c.batch_execute("ALTER EXTENSION pg_distlock UPDATE").expect("update");
    assert_eq!(settle(&mut c, format!("SELECT distlock.fail_task({two}, 'boom', 'wa')")), "true");
    let completed: Vec<i64> = as_role(&mut c, &a, |c| {
        c.query(&format!("SELECT * FROM distlock.complete_tasks(ARRAY[{three}]::bigint[], 'wa')"), &[])
            .expect("batch")
            .iter()
            .map(|r| r.get(0))
            .collect()
    });
    assert_eq!(completed, [three], "the tenant's own job, held by its worker, is completed");
    assert_eq!(
        count(&mut c, "SELECT 1 FROM distlock.task_queue WHERE status = 'processing'"),
        0,
        "no job the tenant settled is left to run again"
    );
}
