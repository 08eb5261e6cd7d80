//! Cumulative per-queue job counters (issue 47, item 3): per database and
//! queue, jobs claimed, completed, failed (to be retried), dead, taken over
//! from an expired lease and put back after one, and a histogram of how
//! long claimed jobs waited. Only ever added to, at commit
//! (queue/counters.rs), or zeroed by an admin. A table of its own beside
//! the main shared state: in the server's shared memory when preloaded,
//! else a DSM registry segment (17+), each with its partition LWLocks inside.
//!
//! Entries are found by a SipHash of (database, queue name) keyed with the
//! server's secret, so nobody can pick queue names that crowd another's
//! place. An entry is never freed, only zeroed (reset) or replaced: a new
//! queue takes a never-used slot among those its lookup probes, or else the
//! one idle longest of those not counted for `IDLE_BEFORE_REPLACED`, and
//! only while its database holds less than its share of the partition
//! (`distlock.queue_counters_database_share`); a database at its share
//! may take back its own idle or reset entries among those probed. Live
//! counters are therefore
//! never reset by anyone's new queue names, whatever database or tenant
//! they come from. A queue that may take no slot is counted in its
//! database's overflow row (one per database for the whole server, in an
//! area of its own with its own lock), and when every overflow row is live
//! with other databases', in the server-wide uncounted figure, so no job
//! goes uncounted without a trace. A lookup reads its whole probe window:
//! a database at its share may take back its own entry past a free slot.

use std::ffi::CStr;

use pgrx::pg_sys;

/// Upper bounds, in seconds, of the wait histogram's buckets (a last one,
/// +Inf, follows): those of the last-hour view `queue_wait_histogram`.
pub const WAIT_BOUNDS: [f64; 16] =
    [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0];
pub const BUCKETS: usize = WAIT_BOUNDS.len() + 1;
pub const PARTITIONS: usize = 16;
/// Bytes of a queue's name kept for listing; longer names are kept cut at
/// a character boundary of the database encoding (`kept_len` < `name_len`).
pub const KEPT_NAME_BYTES: usize = 128;
/// How many slots a lookup inspects.
const MAX_PROBE: usize = 32;
/// How long an entry must have counted nothing before a new queue may take
/// its slot: Prometheus reads a replaced entry as a counter reset, and a
/// series silent for an hour has left every usual `rate()` window (and
/// Prometheus' staleness marking), while a queue dropped for good frees its
/// slot within the hour. Shorter would let a tenant that churns names
/// reset others' quiet but live queues; longer keeps dropped queues' slots.
pub const IDLE_BEFORE_REPLACED_US: i64 = 3_600 * 1_000_000;
/// Databases whose overflow the server counts, each in one row of its
/// own (whatever partition its queues fell in); beyond them, an idle one's
/// row is taken, else the jobs are added to the server-wide uncounted
/// figure ([`uncounted`]), so no job is dropped without a trace.
pub const OVERFLOW_DATABASES: usize = 128;

const TRANCHE: &CStr = c"pg_distlock queue counters";
const SHMEM_NAME: &CStr = c"pg_distlock queue counters v3";
#[cfg(not(feature = "pg15"))]
const SIZES_SEGMENT: &CStr = c"pg_distlock queue counter sizes v3";
#[cfg(not(feature = "pg15"))]
const SEGMENT_NAME: &CStr = c"pg_distlock queue counters v3";

/// What happened to jobs, counted per queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Outcome {
    Claimed = 0,
    Completed,
    /// Failed by its consumer, to be retried.
    Failed,
    /// Out of attempts: failed, or its lease ran out, with none left.
    Dead,
    /// A claim took the job over from an expired lease (also counted as claimed).
    TakenOver,
    /// Its lease ran out and the sweep (or a limited queue's claim) put it back.
    Expired,
}

pub const OUTCOMES: usize = 6;

/// Counts to add to one queue's entry.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Delta {
    pub outcomes: [u64; OUTCOMES],
    /// Non-cumulative: jobs whose wait fell in each bucket.
    pub waits: [u64; BUCKETS],
    pub wait_sum_us: u64,
}

impl Delta {
    pub fn add(&mut self, other: &Delta) {
        for (a, b) in self.outcomes.iter_mut().zip(other.outcomes) {
            *a = a.saturating_add(b);
        }
        for (a, b) in self.waits.iter_mut().zip(other.waits) {
            *a = a.saturating_add(b);
        }
        self.wait_sum_us = self.wait_sum_us.saturating_add(other.wait_sum_us);
    }

    /// Records one wait of `wait_us` microseconds (negative counts as 0).
    pub fn wait(&mut self, wait_us: i64) {
        let wait_us = wait_us.max(0);
        let seconds = wait_us as f64 / 1e6;
        let bucket = WAIT_BOUNDS.iter().position(|&le| seconds <= le).unwrap_or(WAIT_BOUNDS.len());
        self.waits[bucket] += 1;
        self.wait_sum_us = self.wait_sum_us.saturating_add(wait_us as u64);
    }
}

/// One queue of one database. Bump the names above when this changes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Entry {
    pub in_use: bool,
    pub database: u32,
    /// The keyed hash of (database, queue name).
    pub hash: u64,
    /// Length of the whole name in bytes.
    pub name_len: u32,
    pub kept_len: u32,
    pub name: [u8; KEPT_NAME_BYTES],
    pub counts: Delta,
    /// When counting for the queue began (since the server started, the
    /// entry was taken, or it was reset).
    pub since_us: i64,
    pub last_used_us: i64,
}

impl Entry {
    pub fn kept_name(&self) -> &[u8] {
        &self.name[..(self.kept_len as usize).min(KEPT_NAME_BYTES)]
    }

    pub fn name_complete(&self) -> bool {
        self.kept_len == self.name_len
    }
}

#[repr(C)]
struct Table {
    per_partition: usize,
    tranche_id: i32,
    /// One per partition, then the overflow area's.
    locks: [pg_sys::LWLockPadded; PARTITIONS + 1],
    /// Jobs of queues that found no slot, one row per database for the
    /// whole server (`name` unused, `hash` 0).
    overflow: [Entry; OVERFLOW_DATABASES],
    /// Jobs of queues that found no slot, of databases that found no
    /// overflow row (all live): server-wide.
    uncounted: Delta,
    entries: [Entry; 0],
}

static mut TABLE: *mut Table = std::ptr::null_mut();

pub(crate) fn per_partition() -> usize {
    match crate::gucs::QUEUE_COUNTERS_CAPACITY.get().max(0) as usize {
        0 => 0,
        // A database's share is counted per partition, in whole slots: below
        // MIN_PER_PARTITION a share of 50 % rounded to a whole slot was the
        // whole partition, and one database could fill the table.
        capacity => capacity.div_ceil(PARTITIONS).max(MIN_PER_PARTITION),
    }
}

/// The fewest slots of a partition (the capacity is raised to 16 times it).
const MIN_PER_PARTITION: usize = 16;

fn size(per_partition: usize) -> usize {
    std::mem::size_of::<Table>() + per_partition * PARTITIONS * std::mem::size_of::<Entry>()
}

unsafe fn initialize(table: *mut Table, per_partition: usize) {
    unsafe {
        std::ptr::write_bytes(table.cast::<u8>(), 0, size(per_partition));
        (*table).per_partition = per_partition;
        (*table).tranche_id = pg_sys::LWLockNewTrancheId();
        for lock in 0..=PARTITIONS {
            pg_sys::LWLockInitialize(std::ptr::addr_of_mut!((*table).locks[lock].lock), (*table).tranche_id);
        }
    }
}

/// Names the partition locks' wait events in this backend.
unsafe fn register_tranche(table: *mut Table) {
    unsafe { pg_sys::LWLockRegisterTranche((*table).tranche_id, TRANCHE.as_ptr()) }
}

/// The space to request at preload.
pub(crate) fn preload_size() -> usize {
    size(per_partition())
}

/// From shmem_startup_hook.
pub(crate) unsafe fn attach_preloaded() {
    unsafe {
        let mut found = false;
        let per = per_partition();
        let table = pg_sys::ShmemInitStruct(SHMEM_NAME.as_ptr(), size(per), &mut found).cast::<Table>();
        if !found {
            initialize(table, per);
        }
        register_tranche(table);
        TABLE = table;
    }
}

#[cfg(not(feature = "pg15"))]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn init_sizes(ptr: *mut std::ffi::c_void) {
    unsafe { ptr.cast::<usize>().write(per_partition()) }
}

#[cfg(not(feature = "pg15"))]
static mut CREATING: usize = 0;

#[cfg(not(feature = "pg15"))]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn init_segment(ptr: *mut std::ffi::c_void) {
    unsafe { initialize(ptr.cast::<Table>(), CREATING) }
}

/// Without preload (17+): the registry's segments, sized by the first backend.
#[cfg(not(feature = "pg15"))]
pub(crate) unsafe fn attach_registry() {
    unsafe {
        let mut found = false;
        let per = *pg_sys::GetNamedDSMSegment(
            SIZES_SEGMENT.as_ptr(),
            std::mem::size_of::<usize>(),
            Some(init_sizes),
            &mut found,
        )
        .cast::<usize>();
        CREATING = per;
        let table =
            pg_sys::GetNamedDSMSegment(SEGMENT_NAME.as_ptr(), size(per), Some(init_segment), &mut found).cast::<Table>();
        register_tranche(table);
        TABLE = table;
    }
}

/// The table, once this backend has decided its shared state has one, and
/// when it has room (capacity 0 turns counting off).
fn table() -> Option<*mut Table> {
    super::available();
    let table = unsafe { TABLE };
    (!table.is_null() && unsafe { (*table).per_partition } > 0).then_some(table)
}

/// Whether counters are kept: shared memory with a nonzero capacity.
pub fn available() -> bool {
    table().is_some()
}

/// Like [`available`], without deciding where shared state lives (safe
/// in commit callbacks, where that cannot be decided).
pub(crate) fn attached() -> bool {
    let table = unsafe { TABLE };
    !table.is_null() && unsafe { (*table).per_partition } > 0
}

/// Runs `f` on the entries of partition `partition` of `table` under its
/// exclusive LWLock.
fn with_partition<R>(table: *mut Table, partition: usize, f: impl FnOnce(&mut [Entry]) -> R) -> R {
    unsafe {
        let partition = partition % PARTITIONS;
        let per = (*table).per_partition;
        let base = std::ptr::addr_of_mut!((*table).entries).cast::<Entry>();
        let entries = std::slice::from_raw_parts_mut(base.add(partition * per), per);
        super::holding_exclusive(std::ptr::addr_of_mut!((*table).locks[partition].lock), || f(entries))
    }
}

/// Runs `f` on the overflow rows and the uncounted figure of `table` under
/// their exclusive LWLock.
fn with_overflow<R>(table: *mut Table, f: impl FnOnce(&mut [Entry], &mut Delta) -> R) -> R {
    unsafe {
        let overflow = &mut *std::ptr::addr_of_mut!((*table).overflow);
        let uncounted = &mut *std::ptr::addr_of_mut!((*table).uncounted);
        super::holding_exclusive(std::ptr::addr_of_mut!((*table).locks[PARTITIONS].lock), || f(overflow, uncounted))
    }
}

/// Where a lookup leaves a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Its entry.
    Found(usize),
    /// A slot it may take: never used, or idle long enough.
    Take(usize),
    /// None: its jobs go to its database's overflow figure.
    Overflow,
}

fn idle(entry: &Entry, now_us: i64) -> bool {
    now_us.saturating_sub(entry.last_used_us) >= IDLE_BEFORE_REPLACED_US
}

/// The place of (database, hash) among the slots it probes from `start`,
/// at `now_us`; `held` counts the entries its database holds in the
/// partition, asked only when the queue has no entry of its own.
/// A new queue takes a never-used slot, or else the least recently used
/// of the idle ones ([`IDLE_BEFORE_REPLACED_US`]); one that would raise
/// its database's entries in the partition above `share` gets none of
/// those, but may take the least recently used reusable (idle or reset)
/// entry of its own database anywhere in the probed slots. Live entries
/// are never taken. The queue's own entry is looked for in the whole window:
/// an own entry taken back past a free slot lies beyond one.
fn probe(
    entries: &[Entry],
    start: usize,
    database: u32,
    hash: u64,
    now_us: i64,
    share: usize,
    held: impl FnOnce() -> usize,
) -> Place {
    let len = entries.len();
    let mut free: Option<usize> = None;
    let mut idlest: Option<usize> = None;
    let mut own_idlest: Option<usize> = None;
    for step in 0..MAX_PROBE.min(len) {
        let i = (start + step) % len;
        let entry = &entries[i];
        if !entry.in_use {
            free = free.or(Some(i));
            continue;
        }
        // Past a free slot too: a database at its share may take its own
        // reusable entry beyond one (below), where a lookup that stopped at
        // the free slot would not find it again.
        if entry.database == database && entry.hash == hash {
            return Place::Found(i);
        }
        if !idle(entry, now_us) {
            continue;
        }
        let older = |c: Option<usize>| c.is_none_or(|c| entries[c].last_used_us > entry.last_used_us);
        if free.is_none() && older(idlest) {
            idlest = Some(i);
        }
        if entry.database == database && older(own_idlest) {
            own_idlest = Some(i);
        }
    }
    let candidate = if held() < share { free.or(idlest) } else { None };
    match candidate.or(own_idlest) {
        Some(i) => Place::Take(i),
        None => Place::Overflow,
    }
}

/// Entries one database may hold per partition: its share of the
/// partition's slots, rounded down, at least one (as the rate-limit table's).
fn share_limit(per_partition: usize) -> usize {
    let share = crate::gucs::QUEUE_COUNTERS_DATABASE_SHARE.get().clamp(1, 100) as usize;
    (per_partition * share / 100).max(1)
}

/// Adds `delta` to `database`'s overflow row among `overflow`: its own,
/// a free one, or else the one idle longest; false (nothing added) when
/// all are live.
fn add_overflow(overflow: &mut [Entry], database: u32, delta: &Delta, now_us: i64) -> bool {
    let place = overflow.iter().position(|e| e.in_use && e.database == database).or_else(|| {
        overflow
            .iter()
            .enumerate()
            .filter(|(_, e)| !e.in_use || idle(e, now_us))
            .min_by_key(|(_, e)| (e.in_use, e.last_used_us))
            .map(|(i, _)| i)
    });
    let Some(i) = place else { return false };
    let entry = &mut overflow[i];
    if !(entry.in_use && entry.database == database) {
        *entry = Entry::new(database, 0, &[], now_us);
    }
    entry.counts.add(delta);
    entry.last_used_us = now_us;
    true
}

/// Counts for one queue: its keyed hash, its name, how many bytes of it a
/// new entry keeps (at most `KEPT_NAME_BYTES`, ending on a character
/// boundary of the database encoding), and what to add.
pub(crate) struct Addition<'a> {
    pub hash: u64,
    pub name: &'a [u8],
    pub kept: usize,
    pub delta: &'a Delta,
}

/// The partition a queue of keyed hash `hash` lives in.
pub(crate) fn partition_of(hash: u64) -> usize {
    (hash % PARTITIONS as u64) as usize
}

/// Adds `additions` of `database` at `now_us`, all of queues in partition
/// `partition` ([`partition_of`]), under one round of its lock, taking a
/// slot for a queue that has none; returns what found no slot (to go to
/// [`add_overflowed`]). Does not fail (it runs after commit).
pub(crate) fn add_to_partition(database: u32, partition: usize, additions: &[Addition], now_us: i64) -> Delta {
    let mut overflowed = Delta::default();
    if !attached() || additions.is_empty() {
        return overflowed;
    }
    let table = unsafe { TABLE };
    with_partition(table, partition, |entries| {
        let share = share_limit(entries.len());
        // What the database holds in the partition is counted (a walk of
        // the whole partition) only once a queue finds no entry of its own:
        // a commit whose queues all have theirs reads their probe windows only.
        let mut held: Option<usize> = None;
        for a in additions {
            let start = ((a.hash / PARTITIONS as u64) % entries.len() as u64) as usize;
            let place = probe(entries, start, database, a.hash, now_us, share, || {
                *held.get_or_insert_with(|| entries.iter().filter(|e| e.in_use && e.database == database).count())
            });
            let i = match place {
                Place::Found(i) => i,
                Place::Take(i) => {
                    if !(entries[i].in_use && entries[i].database == database) {
                        held = held.map(|h| h + 1);
                    }
                    let kept = &a.name[..a.kept.min(KEPT_NAME_BYTES).min(a.name.len())];
                    entries[i] = Entry::new(database, a.hash, kept, now_us);
                    entries[i].name_len = a.name.len() as u32;
                    i
                }
                Place::Overflow => {
                    overflowed.add(a.delta);
                    continue;
                }
            };
            let entry = &mut entries[i];
            entry.counts.add(a.delta);
            entry.last_used_us = now_us;
        }
    });
    overflowed
}

/// Adds `delta`, jobs of `database` whose queues found no slot, to its
/// overflow row, or to the server-wide uncounted figure when every
/// overflow row is live with another database's; whether it went there.
pub(crate) fn add_overflowed(database: u32, delta: &Delta, now_us: i64) -> bool {
    if !attached() || *delta == Delta::default() {
        return false;
    }
    with_overflow(unsafe { TABLE }, |overflow, uncounted| {
        let counted = add_overflow(overflow, database, delta, now_us);
        if !counted {
            uncounted.add(delta);
        }
        !counted
    })
}

/// The server-wide uncounted figure: jobs of queues that found neither a
/// slot nor an overflow row for their database. None without a table.
/// No SQL function reads it yet (the log says when it first grows).
#[allow(dead_code)]
pub fn uncounted() -> Option<Delta> {
    let table = table()?;
    Some(with_overflow(table, |_, uncounted| *uncounted))
}

impl Entry {
    /// A fresh entry keeping `kept` of the name (whole, as far as it knows).
    fn new(database: u32, hash: u64, kept: &[u8], now_us: i64) -> Entry {
        let mut fresh = Entry {
            in_use: true,
            database,
            hash,
            name_len: kept.len() as u32,
            kept_len: kept.len() as u32,
            name: [0; KEPT_NAME_BYTES],
            counts: Delta::default(),
            since_us: now_us,
            last_used_us: now_us,
        };
        fresh.name[..kept.len()].copy_from_slice(kept);
        fresh
    }
}

/// Copies of the entries of `database`, and its overflow row (None when it
/// has none); None without a table.
pub fn entries_of(database: u32) -> Option<(Vec<Entry>, Option<Entry>)> {
    let table = table()?;
    let mut found = Vec::new();

    for partition in 0..PARTITIONS {
        with_partition(table, partition, |entries| {
            found.extend(entries.iter().filter(|e| e.in_use && e.database == database).copied());
        });
    }
    let lost = with_overflow(table, |overflow, _| overflow.iter().find(|e| e.in_use && e.database == database).copied());
    Some((found, lost))
}

/// Zeroes `entry`, and lets a new queue take its slot until it is counted
/// again: an admin's reset (after dropping queues, a tenant or a database)
/// frees the slots of queues no longer used without waiting an hour; a
/// queue still in use keeps its slot at its next count.
fn zero(entry: &mut Entry, now_us: i64) {
    entry.counts = Delta::default();
    entry.since_us = now_us;
    entry.last_used_us = i64::MIN;
}

/// Zeroes the counts of the entries of `database` for which `which` says
/// so (their names stay, and their places until another queue needs one:
/// [`zero`]), and its overflow row when
/// `overflow_too`; how many entries. None without a table.
pub fn reset(database: u32, now_us: i64, overflow_too: bool, mut which: impl FnMut(&Entry) -> bool) -> Option<i64> {
    let table = table()?;
    let mut reset = 0;
    for partition in 0..PARTITIONS {
        with_partition(table, partition, |entries| {
            for entry in entries.iter_mut().filter(|e| e.in_use && e.database == database) {
                if which(entry) {
                    zero(entry, now_us);
                    reset += 1;
                }
            }
        });
    }
    if overflow_too {
        with_overflow(table, |overflow, _| {
            overflow.iter_mut().filter(|e| e.in_use && e.database == database).for_each(|e| zero(e, now_us));
        });
    }
    Some(reset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_fall_into_their_buckets() {
        let mut d = Delta::default();
        d.wait(0);
        d.wait(5_000); // exactly 0.005 s: le is inclusive
        d.wait(5_001);
        d.wait(-3);
        d.wait(7_200_000_000);
        assert_eq!(d.waits[0], 3);
        assert_eq!(d.waits[1], 1);
        assert_eq!(d.waits[BUCKETS - 1], 1);
        assert_eq!(d.wait_sum_us, 7_200_010_001);
    }

    const HOUR: i64 = IDLE_BEFORE_REPLACED_US;

    /// [`super::probe`] with the entries `database` holds counted.
    fn probe(entries: &[Entry], start: usize, database: u32, hash: u64, now: i64, share: usize) -> Place {
        let held = entries.iter().filter(|e| e.in_use && e.database == database).count();
        super::probe(entries, start, database, hash, now, share, || held)
    }

    fn used(database: u32, hash: u64, last_used_us: i64) -> Entry {
        Entry { last_used_us, ..Entry::new(database, hash, b"q", 0) }
    }

    /// Review 4: a commit whose queues all have their entries does not
    /// count what its database holds (a walk of the whole partition, under
    /// its exclusive lock: 12 ms a commit at the largest capacity).
    #[test]
    fn a_queue_with_its_entry_is_found_without_counting_the_partition() {
        let now = 10 * HOUR;
        let entries: Vec<Entry> = (0..4).map(|i| used(1, 100 + i as u64, now)).collect();
        let asked = std::cell::Cell::new(0);
        let held = || {
            asked.set(asked.get() + 1);
            4
        };
        assert_eq!(super::probe(&entries, 0, 1, 102, now, 4, held), Place::Found(2));
        assert_eq!(asked.get(), 0, "the partition was counted for a queue that has its entry");
        assert_eq!(super::probe(&entries, 0, 1, 9, now, 4, held), Place::Overflow);
        assert_eq!(asked.get(), 1, "a queue without an entry asks once");
    }

    #[test]
    fn live_entries_of_any_database_are_never_taken() {
        let now = 10 * HOUR;
        let entries: Vec<Entry> = (0..4).map(|i| used(1 + i % 2, 100 + i as u64, now - HOUR + 1)).collect();
        // Another database's, or this database's (another tenant's) names: no slot.
        assert_eq!(probe(&entries, 0, 3, 7, now, 4), Place::Overflow);
        assert_eq!(probe(&entries, 0, 1, 7, now, 4), Place::Overflow);
        assert_eq!(probe(&entries, 1, 2, 101, now, 4), Place::Found(1));
    }

    #[test]
    fn the_longest_idle_entry_is_taken_and_a_free_slot_first() {
        let now = 10 * HOUR;
        let mut entries: Vec<Entry> = vec![
            used(1, 1, now - HOUR),
            used(1, 2, now - 3 * HOUR),
            used(2, 3, now - 2 * HOUR),
            used(2, 4, now),
        ];
        assert_eq!(probe(&entries, 0, 3, 9, now, 4), Place::Take(1));
        entries[2].in_use = false;
        assert_eq!(probe(&entries, 0, 3, 9, now, 4), Place::Take(2));
    }

    #[test]
    fn a_database_beyond_its_share_gets_no_new_slot_but_may_replace_its_own() {
        let now = 10 * HOUR;
        let mut entries: Vec<Entry> = vec![used(1, 1, now), used(1, 2, now), used(2, 3, now), Entry::new(0, 0, b"", 0)];
        entries[3].in_use = false;
        assert_eq!(probe(&entries, 0, 1, 9, now, 2), Place::Overflow);
        assert_eq!(probe(&entries, 0, 2, 9, now, 2), Place::Take(3));
        entries[1].last_used_us = now - 2 * HOUR;
        entries[3] = used(2, 4, now);
        assert_eq!(probe(&entries, 0, 1, 9, now, 2), Place::Take(1));
    }

    #[test]
    fn a_reset_entry_may_be_taken_until_counted_again() {
        let now = 10 * HOUR;
        let mut entries = vec![used(1, 1, now)];
        zero(&mut entries[0], now);
        assert_eq!(probe(&entries, 0, 1, 1, now, 1), Place::Found(0));
        assert_eq!(probe(&entries, 0, 2, 9, now, 1), Place::Take(0));
    }

    /// Review 2: a database at its share whose own entries were reset (or
    /// idled) may take one of them, even when the probe meets a free slot
    /// first (the free slot is refused by the share; its own is not).
    #[test]
    fn a_database_at_its_share_takes_its_own_reset_entry_past_a_free_slot() {
        let now = 10 * HOUR;
        let mut entries: Vec<Entry> = vec![used(1, 1, now), used(1, 2, now), Entry::new(0, 0, b"", 0), used(2, 3, now)];
        entries[2].in_use = false;
        zero(&mut entries[0], now);
        zero(&mut entries[1], now);
        // From slot 1: its own reset entry 1, then the free slot 2.
        assert_eq!(probe(&entries, 1, 1, 9, now, 2), Place::Take(1));
    }

    /// Review 3 of metrics-counters: an entry taken back past a free slot
    /// (above) is found there by the queue's next lookup, not taken again.
    #[test]
    fn a_queue_finds_its_entry_past_a_free_slot() {
        let now = 10 * HOUR;
        let mut entries: Vec<Entry> = vec![Entry::new(0, 0, b"", 0), used(1, 7, now)];
        entries[0].in_use = false;
        assert_eq!(probe(&entries, 0, 1, 7, now, 2), Place::Found(1));
    }

    #[test]
    fn overflow_is_counted_per_database_and_live_figures_stay() {
        let now = 10 * HOUR;
        let mut overflow = [Entry::new(0, 0, b"", 0); 2];
        overflow.iter_mut().for_each(|e| e.in_use = false);
        let mut one = Delta::default();
        one.outcomes[Outcome::Claimed as usize] = 1;
        add_overflow(&mut overflow, 1, &one, now);
        add_overflow(&mut overflow, 1, &one, now);
        add_overflow(&mut overflow, 2, &one, now);
        assert!(!add_overflow(&mut overflow, 3, &one, now), "both rows live: nothing added");
        assert_eq!(overflow[0].database, 1);
        assert_eq!(overflow[0].counts.outcomes[0], 2);
        assert_eq!(overflow[1].counts.outcomes[0], 1);
        add_overflow(&mut overflow, 3, &one, now + HOUR);
        assert_eq!(overflow.iter().filter(|e| e.database == 3).count(), 1);
    }
}
