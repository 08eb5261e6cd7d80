//! Failover for real: a fleet of workers (session claims, lease-mode
//! claims, leases, leader election, queue consumers) runs against the
//! Patroni stack through a multi-host conninfo while the leader's
//! postmaster is killed with SIGKILL. Synchronous replication is on.

use std::sync::Arc;
use std::time::Duration;

use crate::checker::{check, grants, summary, superseded};
use crate::fleet::{prepare, Fleet, Role, Worker};
use crate::ha::{kill_postmaster, Ha};
use crate::history::{history_path, History};
use crate::support::*;

const TASKS: i32 = 300;
const JOBS: i32 = 300;

const ROLES: &[Role] = &[
    Role::SessionClaims,
    Role::SessionClaims,
    Role::LeaseClaims,
    Role::LeaseClaims,
    Role::Lease("ledger"),
    Role::Lease("ledger"),
    Role::Election("scheduler"),
    Role::Election("scheduler"),
    Role::Queue,
    Role::Queue,
];

/// Acknowledged operations of `kind` on `port` in the history so far.
fn acked(history: &History, kind: &str, resource: &str, port: u16) -> usize {
    history.read().iter().filter(|o| o.kind == kind && o.resource.starts_with(resource) && o.port == port && o.acked()).count()
}

fn every_kind_wrote(history: &History, port: u16) -> bool {
    ["task:", "lease:", "election:"].iter().all(|r| acked(history, "write", r, port) >= 3)
        && acked(history, "complete", "job:", port) >= 3
}

#[test]
fn a_fleet_carries_on_after_the_leader_is_killed_and_nothing_is_lost_or_done_twice() {
    let Some(ha) = Ha::from_env("failover") else { return };
    let old = ha.healthy(true);
    let db = fresh_db_on(old, "ha_failover");
    prepare(&mut connect_to(old, &db, "ha-test"), TASKS, &["ledger"], &["scheduler"], JOBS);
    let history = Arc::new(History::create(&history_path("failover")));
    let fleet = Fleet::start(&ha.conninfo(&db), ROLES, &history);
    eventually("every kind of worker to write on the leader", Duration::from_secs(30), || every_kind_wrote(&history, old));

    kill_postmaster(old);
    let new = ha.promoted(old);
    let mut c = connect_to(new, &db, "ha-test");
    eventually("the fleet to go on on the new leader and finish every slot and job", Duration::from_secs(90), || {
        // The first sweep on the new primary ends the session claims that
        // died with the old one.
        let _ = c.query("SELECT distlock.check_and_recover_timeout_tasks()", &[]);
        every_kind_wrote(&history, new)
            && count(&mut c, "SELECT 1 FROM distlock.scheduled_tasks WHERE next_run_at <= now()") == 0
            && count(&mut c, "SELECT 1 FROM distlock.jobs WHERE status <> 'completed'") == 0
    });
    // Writes under tokens from before the failover that newer grants have
    // since replaced, sent to the new leader: each must be refused.
    let mut zombie = Worker::new(&ha.conninfo(&db), "zombie", &history);
    assert!(zombie.connected());
    let superseded = superseded(&history.read(), |g| g.port == old);
    assert!(superseded.len() >= 2, "old-epoch tokens to replay: {superseded:?}");
    for (resource, token) in &superseded {
        assert!(!zombie.fenced_write("stale-write", resource, *token, None), "{resource} took old token {token}");
    }
    fleet.stop();

    let ops = history.read();
    eprintln!("failover history {}: {}", history.path(), summary(&ops));
    let violations = check(&mut c, &ops);
    assert!(violations.is_empty(), "{} violations, history in {}:\n{}", violations.len(), history.path(), violations.join("\n"));
    assert_eq!(count(&mut c, "SELECT 1 FROM applied WHERE resource LIKE 'task:%'"), TASKS as i64, "one result per slot");
    assert_eq!(count(&mut c, "SELECT 1 FROM done"), JOBS as i64, "one result per job");
    tokens_rise_across(&ops, old, new);
}

/// Every token and term first granted on the new leader exceeds every one
/// acknowledged on the old leader (tasks draw from one sequence, leases and
/// elections from another).
fn tokens_rise_across(ops: &[crate::history::Op], old: u16, new: u16) {
    for tasks in [true, false] {
        let grants: Vec<_> = grants(ops)
            .filter(|o| o.resource.starts_with("task:") == tasks)
            .collect();
        let before: Vec<_> = grants.iter().filter(|g| g.port == old).collect();
        let max_before = before.iter().filter_map(|g| g.token).max().expect("grants before the failover");
        // A lease renewed or a leadership kept across the failover keeps
        // its number: only numbers not seen before are new grants.
        let min_after = grants
            .iter()
            .filter(|g| g.port == new && !before.iter().any(|b| b.token == g.token && b.resource == g.resource))
            .filter_map(|g| g.token)
            .min()
            .expect("new grants after the failover");
        assert!(min_after > max_before, "tasks: {tasks}: a grant after the failover got {min_after}, one before {max_before}");
    }
}
