//! Counting committed queue work (issue 47, item 3). The statements that
//! claim, settle and reap jobs note what they did here, per backend and per
//! subtransaction; at COMMIT the notes are added to the shared counters
//! (shared/queue_counters.rs), one LWLock round per partition the
//! transaction's queues fall in (and one for the overflow rows, when some
//! found no slot).
//! A subtransaction rolled back (a savepoint, a consumer's empty look)
//! drops its notes and those of the subtransactions it held; so does a
//! rolled-back transaction. A subtransaction released (committed) hands its
//! notes to its parent, merged per queue, so a transaction keeps one note
//! per queue and open subtransaction level, however many subtransactions it
//! runs (a PL/pgSQL loop with an exception block: one per iteration). The
//! notes are a stack of levels, one per open subtransaction that noted
//! something (the current one's last), each a hash map by queue name: a
//! note, a merge and the commit cost time linear in the queues noted.
//!
//! PREPARE TRANSACTION drops them as well: COMMIT PREPARED may run in any
//! session (and after a restart), which has no record of them, and
//! counting at PREPARE would count work that ROLLBACK PREPARED undoes. So
//! the counters never count work that did not commit, and leave out the
//! work of prepared transactions that did.

use std::cell::RefCell;
use std::collections::HashMap;

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::errors::{raise, raise_with_hint};
use crate::shared::queue_counters::{
    self as shared_counters, Addition, Delta, Outcome, BUCKETS, KEPT_NAME_BYTES, PARTITIONS, WAIT_BOUNDS,
};
use crate::text::Text;

/// What one subtransaction level did to one queue.
struct Note {
    /// How many bytes of the queue's name a new shared entry keeps.
    kept: usize,
    delta: Delta,
}

impl Note {
    fn merge(&mut self, other: &Note) {
        self.delta.add(&other.delta);
    }
}

/// The notes of one subtransaction, by queue name.
struct Level {
    subxact: pg_sys::SubTransactionId,
    notes: HashMap<Vec<u8>, Note>,
}

/// Adds the notes of `from` to `into`, walking the smaller map.
fn merge_maps(into: &mut HashMap<Vec<u8>, Note>, mut from: HashMap<Vec<u8>, Note>) {
    if from.len() > into.len() {
        std::mem::swap(into, &mut from);
    }
    for (queue, note) in from {
        match into.get_mut(&queue) {
            Some(n) => n.merge(&note),
            None => {
                into.insert(queue, note);
            }
        }
    }
}

/// The longest prefix of `queue`, at most `KEPT_NAME_BYTES`, that ends on
/// a character boundary of the database encoding (pg_mbcliplen: a UTF-8
/// name is never cut inside a character).
fn kept_length(queue: &[u8]) -> usize {
    if queue.len() <= KEPT_NAME_BYTES {
        return queue.len();
    }
    let kept = unsafe { pg_sys::pg_mbcliplen(queue.as_ptr().cast(), queue.len() as i32, KEPT_NAME_BYTES as i32) };
    (kept.max(0) as usize).min(KEPT_NAME_BYTES)
}

thread_local! {
    static NOTES: RefCell<Vec<Level>> = const { RefCell::new(Vec::new()) };
    /// Whether this session logged that jobs went uncounted.
    static LOGGED_UNCOUNTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Notes `outcome` for a job of `queue` in the current subtransaction;
/// `wait_us`, for a claim of a runnable job, is how long it waited. Does
/// nothing without shared counters.
pub(crate) fn note(queue: &[u8], outcome: Outcome, wait_us: Option<i64>) {
    if !shared_counters::available() {
        return;
    }
    let subxact = unsafe { pg_sys::GetCurrentSubTransactionId() };
    NOTES.with(|levels| {
        let mut levels = levels.borrow_mut();
        if levels.last().is_none_or(|l| l.subxact != subxact) {
            levels.push(Level { subxact, notes: HashMap::new() });
        }
        let Some(level) = levels.last_mut() else { return };
        let count = |delta: &mut Delta| {
            delta.outcomes[outcome as usize] += 1;
            if let Some(wait_us) = wait_us {
                delta.wait(wait_us);
            }
        };
        match level.notes.get_mut(queue) {
            Some(note) => count(&mut note.delta),
            None => {
                let mut note = Note { kept: kept_length(queue), delta: Delta::default() };
                count(&mut note.delta);
                level.notes.insert(queue.to_vec(), note);
            }
        }
    });
}

/// A subtransaction `child` released: its notes (and those of any level
/// above it, though each is merged into it or dropped when it ends) become
/// `parent`'s, added to the parent's note of the same queue where it has one.
fn merge_into_parent(levels: &mut Vec<Level>, child: pg_sys::SubTransactionId, parent: pg_sys::SubTransactionId) {
    let mut moved: Option<HashMap<Vec<u8>, Note>> = None;
    while let Some(level) = levels.pop_if(|l| l.subxact >= child) {
        match &mut moved {
            Some(m) => merge_maps(m, level.notes),
            None => moved = Some(level.notes),
        }
    }
    let Some(moved) = moved else { return };
    match levels.last_mut() {
        Some(level) if level.subxact == parent => merge_maps(&mut level.notes, moved),
        _ => levels.push(Level { subxact: parent, notes: moved }),
    }
}

/// The keyed hash of (database, queue) the shared table finds a queue by.
fn hash(secret: [u64; 2], database: u32, queue: &[u8]) -> u64 {
    use std::hash::Hasher;
    let mut hasher = siphasher::sip::SipHasher13::new_with_keys(secret[0], secret[1]);
    hasher.write(&database.to_le_bytes());
    hasher.write(queue);
    hasher.finish()
}

/// At commit: adds this transaction's notes, one per queue, grouped by
/// partition (one lock round each; the hashes are computed before), and
/// what found no slot to the database's overflow row in one more round.
fn apply() {
    let levels = NOTES.with(|n| std::mem::take(&mut *n.borrow_mut()));
    if levels.is_empty() || !shared_counters::attached() {
        return;
    }
    let Some(secret) = crate::shared::server_secret() else { return };
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let now = unsafe { pg_sys::GetCurrentTimestamp() };
    let mut merged: HashMap<Vec<u8>, Note> = HashMap::new();
    for level in levels {
        merge_maps(&mut merged, level.notes);
    }
    let mut by_partition: [Vec<Addition>; PARTITIONS] = std::array::from_fn(|_| Vec::new());
    for (queue, note) in &merged {
        let hash = hash(secret, database, queue);
        by_partition[shared_counters::partition_of(hash)].push(Addition {
            hash,
            name: queue,
            kept: note.kept,
            delta: &note.delta,
        });
    }
    let mut overflowed = Delta::default();
    for (partition, additions) in by_partition.iter().enumerate() {
        overflowed.add(&shared_counters::add_to_partition(database, partition, additions, now));
    }
    if shared_counters::add_overflowed(database, &overflowed, now) && !LOGGED_UNCOUNTED.replace(true) {
        pgrx::log!(
            "pg_distlock: queue counters: jobs of database {database} found no slot and no overflow row \
             (every overflow row is live); they are added to the server-wide uncounted figure only \
             (logged once per session; raise distlock.queue_counters_capacity)"
        );
    }
}

fn forget_all() {
    NOTES.with(|n| n.borrow_mut().clear());
}

#[pg_guard]
unsafe extern "C-unwind" fn on_xact_event(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT => apply(),
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT | XACT_EVENT_PREPARE => forget_all(),
        _ => {}
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_subxact_event(
    event: pg_sys::SubXactEvent::Type,
    my_subid: pg_sys::SubTransactionId,
    parent_subid: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    match event {
        // Subtransaction ids grow within a transaction: those from
        // `my_subid` on, when it aborts, are it and the subtransactions it held.
        pg_sys::SubXactEvent::SUBXACT_EVENT_ABORT_SUB => {
            NOTES.with(|n| n.borrow_mut().retain(|level| level.subxact < my_subid))
        }
        pg_sys::SubXactEvent::SUBXACT_EVENT_COMMIT_SUB => {
            NOTES.with(|n| merge_into_parent(&mut n.borrow_mut(), my_subid, parent_subid))
        }
        _ => {}
    }
}

pub fn register_callbacks() {
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_xact_event), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(on_subxact_event), std::ptr::null_mut());
    }
}

fn require_counters() {
    if !crate::shared::available() {
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "pg_distlock queue counters need shared memory, which this server does not give them",
            crate::pg_compat::SHARED_MEMORY_HINT,
        );
    }
    if !shared_counters::available() {
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "pg_distlock queue counters are off",
            "Set distlock.queue_counters_capacity above 0 and restart the server.",
        );
    }
}

fn timestamp(us: i64) -> TimestampWithTimeZone {
    TimestampWithTimeZone::try_from(us).unwrap_or_else(|_| TimestampWithTimeZone::positive_infinity())
}

fn count(value: u64) -> i64 {
    value.min(i64::MAX as u64) as i64
}

/// This database's cumulative job counters, per queue in the caller's
/// monitor scope: committed work only, since the server started (or the
/// queue's counters were reset, or its entry taken: `since`). A queue name
/// longer than 128 bytes is shown cut at a character boundary
/// (`queue_complete` false); a cut name is in a scope only when its kept
/// bytes start with one of the scope's prefixes. `wait_le` are the wait
/// histogram's upper bounds in seconds (the last infinite), `wait_buckets`
/// the claims of runnable jobs that waited at most each (cumulative).
/// A row with a NULL queue, shown to monitors of every queue only, counts
/// the jobs of queues that found no place in the shared table (it was
/// full of live counters, or this database held its share of it).
#[pg_extern(volatile, parallel_restricted)]
#[allow(clippy::type_complexity)]
fn queue_counters() -> TableIterator<
    'static,
    (
        name!(queue, Option<Text>),
        name!(queue_complete, bool),
        name!(claimed, i64),
        name!(completed, i64),
        name!(failed, i64),
        name!(dead, i64),
        name!(taken_over, i64),
        name!(expired, i64),
        name!(wait_le, Vec<f64>),
        name!(wait_buckets, Vec<i64>),
        name!(wait_sum, f64),
        name!(wait_count, i64),
        name!(since, TimestampWithTimeZone),
    ),
> {
    require_counters();
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let scope = crate::scopes::of_caller(crate::scopes::Capability::Monitor);
    let (mut entries, overflow) = shared_counters::entries_of(database).unwrap_or_default();
    entries.retain(|e| scope.admits(e.kept_name()));
    entries.sort_by(|a, b| a.kept_name().cmp(b.kept_name()).then(a.name_len.cmp(&b.name_len)));
    // The overflow mixes every tenant's queues: not for a scoped monitor.
    let overflow = overflow.filter(|_| matches!(*scope, crate::scopes::Scope::Everything));
    let rows = entries.into_iter().map(|e| (Some(e), e)).chain(overflow.map(|e| (None, e)));
    let bounds: Vec<f64> = WAIT_BOUNDS.iter().copied().chain([f64::INFINITY]).collect();
    TableIterator::new(rows.map(move |(named, e)| {
        let c = &e.counts;
        let mut cumulative = Vec::with_capacity(BUCKETS);
        let mut total = 0u64;
        for jobs in c.waits {
            total = total.saturating_add(jobs);
            cumulative.push(count(total));
        }
        (
            named.map(|e| Text::from(e.kept_name())),
            named.is_some_and(|e| e.name_complete()),
            count(c.outcomes[Outcome::Claimed as usize]),
            count(c.outcomes[Outcome::Completed as usize]),
            count(c.outcomes[Outcome::Failed as usize]),
            count(c.outcomes[Outcome::Dead as usize]),
            count(c.outcomes[Outcome::TakenOver as usize]),
            count(c.outcomes[Outcome::Expired as usize]),
            bounds.clone(),
            cumulative,
            c.wait_sum_us as f64 / 1e6,
            count(total),
            timestamp(e.since_us),
        )
    }))
}

/// Zeroes this database's queue counters: of queue `p_queue`, or of every
/// queue when NULL (and then the overflow row too); returns how many
/// queues' counters were zeroed.
/// Prometheus sees a counter reset.
#[pg_extern(volatile, parallel_unsafe)]
fn reset_queue_counters(p_queue: default!(Option<Text>, "NULL")) -> i64 {
    require_counters();
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let now = unsafe { pg_sys::GetCurrentTimestamp() };
    let queue = p_queue.map(|q| crate::text::checked_name(q, "p_queue"));
    let target = queue.as_ref().map(|queue| {
        let secret = crate::shared::server_secret()
            .unwrap_or_else(|| raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, "no shared-memory secret"));
        hash(secret, database, queue.bytes())
    });
    shared_counters::reset(database, now, target.is_none(), |e| target.is_none_or(|h| e.hash == h)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(levels: &mut Vec<Level>, subxact: u32, queue: &str, claimed: u64) {
        if levels.last().is_none_or(|l| l.subxact != subxact) {
            levels.push(Level { subxact, notes: HashMap::new() });
        }
        let mut delta = Delta::default();
        delta.outcomes[Outcome::Claimed as usize] = claimed;
        let mut one = HashMap::new();
        one.insert(queue.as_bytes().to_vec(), Note { kept: queue.len(), delta });
        merge_maps(&mut levels.last_mut().unwrap().notes, one);
    }

    fn summary(levels: &[Level]) -> Vec<(u32, Vec<u8>, u64)> {
        let mut all: Vec<_> = levels
            .iter()
            .flat_map(|l| l.notes.iter().map(move |(q, n)| (l.subxact, q.clone(), n.delta.outcomes[0])))
            .collect();
        all.sort();
        all
    }

    #[test]
    fn released_subtransactions_leave_one_note_per_queue_and_level() {
        // Top level 1 noted "a"; subtransaction 2 noted "b", its child 3 "a" and "b".
        let mut levels = Vec::new();
        note(&mut levels, 1, "a", 1);
        note(&mut levels, 2, "b", 1);
        note(&mut levels, 3, "a", 1);
        note(&mut levels, 3, "b", 2);
        merge_into_parent(&mut levels, 3, 2);
        assert_eq!(summary(&levels), vec![(1, b"a".to_vec(), 1), (2, b"a".to_vec(), 1), (2, b"b".to_vec(), 3)]);
        merge_into_parent(&mut levels, 2, 1);
        assert_eq!(summary(&levels), vec![(1, b"a".to_vec(), 2), (1, b"b".to_vec(), 3)]);
        // A loop of released subtransactions: the notes stay two.
        for subxact in 4..10_000 {
            note(&mut levels, subxact, "b", 1);
            merge_into_parent(&mut levels, subxact, 1);
        }
        assert_eq!(summary(&levels), vec![(1, b"a".to_vec(), 2), (1, b"b".to_vec(), 3 + 9_996)]);
        // A released subtransaction that noted nothing changes nothing.
        merge_into_parent(&mut levels, 10_000, 1);
        assert_eq!(levels.len(), 1);
        assert_eq!(levels[0].notes.len(), 2);
    }

    #[test]
    fn a_released_subtransaction_without_noting_parent_hands_its_notes_up() {
        // Top level 1 noted nothing; subtransaction 2 did: its notes become level 1's.
        let mut levels = Vec::new();
        note(&mut levels, 2, "a", 1);
        merge_into_parent(&mut levels, 2, 1);
        assert_eq!(summary(&levels), vec![(1, b"a".to_vec(), 1)]);
    }
}
