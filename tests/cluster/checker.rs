//! Checks a fleet's history against what the database kept. Returns every
//! violation found, each a sentence naming the operations involved:
//!
//! - lost: an acknowledged fenced write (or job completion) is missing;
//! - duplicated: a write applied twice, a write the client saw refused
//!   applied anyway, one due slot (or job) applied twice;
//! - lost update: the counter chain has a gap or a fork (two writes read
//!   the same value);
//! - stale write accepted: a counter took a lower token after a higher one,
//!   a write landed that began after a newer grant of its resource had been
//!   acknowledged, or a deliberately stale write was not refused;
//! - reissued token: one token (or term) granted to two holders;
//! - accepted after the claim was lost: a fenced write or a release that a
//!   session claim's holder began with its token after its connection ran
//!   DISCARD ALL or pg_advisory_unlock_all() (`lose-claim`) was applied or
//!   acknowledged, or check_fencing_token still accepts that token at the end.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::history::{Op, Outcome};
use crate::support::*;

struct Applied {
    seq: i64,
    op: u64,
    resource: String,
    token: i64,
    n_before: i64,
    n_after: i64,
    slot: Option<String>,
}

pub fn check(c: &mut Client, ops: &[Op]) -> Vec<String> {
    let mut violations = Vec::new();
    let applied: Vec<Applied> = c
        .query("SELECT seq, op, resource, token, n_before, n_after, slot::text FROM applied ORDER BY seq", &[])
        .expect("applied")
        .iter()
        .map(|r| Applied {
            seq: r.get(0),
            op: r.get::<_, i64>(1) as u64,
            resource: r.get(2),
            token: r.get(3),
            n_before: r.get(4),
            n_after: r.get(5),
            slot: r.get(6),
        })
        .collect();
    let by_id: HashMap<u64, &Op> = ops.iter().map(|o| (o.id, o)).collect();
    writes_match_the_history(&applied, ops, &by_id, &mut violations);
    counters_chain(c, &applied, &mut violations);
    no_stale_write(&applied, ops, &by_id, &mut violations);
    no_token_reissued(ops, &mut violations);
    nothing_accepted_after_a_lost_claim(c, &applied, ops, &mut violations);
    jobs_once(c, ops, &mut violations);
    violations
}

fn writes_match_the_history(applied: &[Applied], ops: &[Op], by_id: &HashMap<u64, &Op>, v: &mut Vec<String>) {
    let mut seen = HashSet::new();
    for a in applied {
        if !seen.insert(a.op) {
            v.push(format!("duplicated: write op {} applied twice", a.op));
        }
        match by_id.get(&a.op) {
            None => v.push(format!("applied write {} (seq {}) is not in the history", a.op, a.seq)),
            Some(op) if matches!(op.outcome, Outcome::Refused(_)) => {
                v.push(format!("duplicated: write {op:?} was refused to its client but applied"))
            }
            Some(_) => {}
        }
    }
    for op in ops.iter().filter(|o| o.kind.ends_with("write") && o.acked()) {
        if !seen.contains(&op.id) {
            v.push(format!("lost: acknowledged write {op:?} is not applied"));
        }
    }
    let mut slots: HashMap<(&str, &str), u64> = HashMap::new();
    for a in applied.iter().filter(|a| a.resource.starts_with("task:")) {
        let slot = a.slot.as_deref().unwrap_or("none");
        if let Some(first) = slots.insert((&a.resource, slot), a.op) {
            v.push(format!("duplicated: slot {slot} of {} applied by writes {first} and {}", a.resource, a.op));
        }
    }
}

fn counters_chain(c: &mut Client, applied: &[Applied], v: &mut Vec<String>) {
    let mut last: BTreeMap<&str, (i64, i64)> = BTreeMap::new(); // resource -> (n, token)
    for a in applied {
        let (n, token) = last.get(a.resource.as_str()).copied().unwrap_or((0, 0));
        if a.n_before != n || a.n_after != n + 1 {
            v.push(format!("lost update: {} went {} -> {} at seq {} after reaching {n}", a.resource, a.n_before, a.n_after, a.seq));
        }
        if a.token < token {
            v.push(format!("stale write accepted: {} took token {} after {token} (seq {})", a.resource, a.token, a.seq));
        }
        last.insert(&a.resource, (a.n_after, a.token));
    }
    for row in c.query("SELECT resource, n FROM counters", &[]).expect("counters") {
        let (resource, n): (String, i64) = (row.get(0), row.get(1));
        let expected = last.get(resource.as_str()).map_or(0, |l| l.0);
        if n != expected {
            v.push(format!("counter {resource} is {n}, its applied writes say {expected}"));
        }
    }
}

/// Acknowledged grants that gave a token or term.
pub fn grants(ops: &[Op]) -> impl Iterator<Item = &Op> {
    ops.iter().filter(|o| matches!(o.kind.as_str(), "claim" | "acquire" | "campaign") && o.acked() && o.token.is_some())
}

/// A write that began after a newer grant of its resource was acknowledged
/// came from a holder that had already lost: it must not have landed.
fn no_stale_write(applied: &[Applied], ops: &[Op], by_id: &HashMap<u64, &Op>, v: &mut Vec<String>) {
    let mut newest: HashMap<&str, Vec<(u64, i64)>> = HashMap::new(); // resource -> (acked at, token)
    for g in grants(ops) {
        newest.entry(&g.resource).or_default().push((g.end, g.token.expect("token")));
    }
    for a in applied {
        let Some(op) = by_id.get(&a.op) else { continue };
        let newer = newest.get(a.resource.as_str()).into_iter().flatten().find(|(at, t)| *t > a.token && *at < op.start);
        if let Some((_, t)) = newer {
            v.push(format!("stale write accepted: {op:?} began after token {t} of {} was acknowledged", a.resource));
        }
    }
    for op in ops.iter().filter(|o| o.kind == "stale-write" && o.acked()) {
        v.push(format!("stale write accepted: deliberately stale {op:?} committed"));
    }
}

/// Task tokens come from one sequence, lease tokens and terms from another:
/// each number may belong to one holder only (a lease re-acquired or a
/// leadership renewed by its holder keeps its number).
fn no_token_reissued(ops: &[Op], v: &mut Vec<String>) {
    let mut holders: HashMap<(bool, i64), (&str, &str)> = HashMap::new();
    for g in grants(ops) {
        let key = (g.resource.starts_with("task:"), g.token.expect("token"));
        let holder = (g.resource.as_str(), g.worker.as_str());
        match holders.get(&key) {
            Some(first) if *first != holder => {
                v.push(format!("reissued token: {} granted to {first:?} and to {holder:?}", key.1))
            }
            _ => {
                holders.insert(key, holder);
            }
        }
    }
}

/// A session claim is its holder's lock: once the holder's connection gave
/// its advisory locks up, the claim is over, whether or not another worker
/// has claimed the task since, and nothing its holder does with the token
/// may count (docs/tasks.md, Fencing).
fn nothing_accepted_after_a_lost_claim(c: &mut Client, applied: &[Applied], ops: &[Op], v: &mut Vec<String>) {
    let applied_ops: HashSet<u64> = applied.iter().map(|a| a.op).collect();
    for lost in ops.iter().filter(|o| o.kind == "lose-claim" && o.acked()) {
        let after = ops.iter().filter(|o| {
            matches!(o.kind.as_str(), "write" | "release")
                && o.worker == lost.worker
                && o.resource == lost.resource
                && o.token == lost.token
                && o.start >= lost.end
        });
        for op in after {
            if op.acked() || applied_ops.contains(&op.id) {
                v.push(format!("accepted after the claim was lost: {op:?} after {lost:?}"));
            }
        }
        let task: i32 = lost.resource.trim_start_matches("task:").parse().expect("task id");
        let accepted: bool = c
            .query_one("SELECT distlock.check_fencing_token($1, $2)", &[&task, &lost.token.expect("token")])
            .expect("check_fencing_token")
            .get(0);
        if accepted {
            v.push(format!("accepted after the claim was lost: check_fencing_token still accepts the token of {lost:?}"));
        }
    }
}

fn jobs_once(c: &mut Client, ops: &[Op], v: &mut Vec<String>) {
    let done: Vec<(i64, i64)> =
        c.query("SELECT job, op FROM done", &[]).expect("done").iter().map(|r| (r.get(0), r.get(1))).collect();
    let mut jobs = HashSet::new();
    for (job, _) in &done {
        if !jobs.insert(*job) {
            v.push(format!("duplicated: job {job} completed twice"));
        }
    }
    let ops_done: HashSet<u64> = done.iter().map(|(_, op)| *op as u64).collect();
    for op in ops.iter().filter(|o| o.kind == "complete" && o.acked()) {
        if !ops_done.contains(&op.id) {
            v.push(format!("lost: acknowledged completion {op:?} has no result"));
        }
    }
}

/// For each resource, the newest token of a grant chosen by `granted` that
/// a later acknowledged grant has replaced: what a holder that just lost its
/// hold would still carry.
pub fn superseded(ops: &[Op], granted: impl Fn(&Op) -> bool) -> Vec<(String, i64)> {
    let all: Vec<&Op> = grants(ops).collect();
    let mut picked: BTreeMap<&str, i64> = BTreeMap::new();
    for g in all.iter().filter(|g| granted(g)) {
        let token = g.token.expect("token");
        if all.iter().any(|n| n.resource == g.resource && n.token > g.token) {
            let newest = picked.entry(&g.resource).or_insert(token);
            *newest = (*newest).max(token);
        }
    }
    picked.into_iter().map(|(r, t)| (r.to_string(), t)).collect()
}

/// Operations per kind and outcome, for the test's output.
pub fn summary(ops: &[Op]) -> String {
    summary_of(ops.iter().map(|op| (op.kind.as_str(), &op.outcome)))
}

/// The same for any history's (kind, outcome) pairs (the queue's has operations of its own).
pub fn summary_of<'a>(ops: impl Iterator<Item = (&'a str, &'a Outcome)>) -> String {
    let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
    for (kind, outcome) in ops {
        let outcome = match outcome {
            Outcome::Ok => "ok".to_string(),
            Outcome::Refused(code) => code.clone(),
            Outcome::Unknown => "unknown".to_string(),
        };
        *counts.entry((kind.to_string(), outcome)).or_default() += 1;
    }
    counts.iter().map(|((k, o), n)| format!("{k} {o}: {n}")).collect::<Vec<_>>().join(", ")
}
