//! Waiting for jobs without polling and without a herd.
//!
//! With shared memory (pg_distlock preloaded, or the DSM registry on 17+), a
//! consumer that may wait registers in the sleepers table before its first
//! look (the queues it takes, how many jobs it claims at once, when it
//! wakes by itself), so that a look that finds nothing can sleep at once on
//! its latch: no commit between the look and the sleep goes unnoticed. A
//! commit wakes sleepers of a queue until their batches cover the jobs of
//! that queue it made runnable (a commit of 128
//! jobs wakes two sleepers claiming 64 each, or 128 claiming one), once
//! its rows are visible to their next snapshot: an enqueue wakes one,
//! a failed attempt one (its retry time is new), a claim rolled back one per
//! job it returns, a resumed queue all of its sleepers. A committed claim
//! wakes only a sleeper that would otherwise sleep past the new lease's
//! expiry. Jobs that become claimable with time alone (a run_after coming,
//! a lease running out) need no one to commit: the sleeper computes when
//! the next one is due and sleeps until then.
//!
//! A woken sleeper clears its flag when it looks; one that leaves with a
//! wake-up it did not act on (cancelled, terminated, or a wake-up that came
//! during its last look) passes it to another sleeper of the same queue, so
//! that no job waits for a sleeper that is gone; so does one woken for a
//! queue that its look did not reach (its batch filled from queues named
//! before it), and one that leaves knowing when a job comes due (it may be
//! the only one woken to learn it). A backend that exits while it sleeps
//! (FATAL skips destructors) does the same from an exit callback. A sleeper
//! also watches its client's socket and ends the backend when the client
//! is gone (client_connection.rs), so that it never claims for nobody.
//! Sleepers whose scope limits the jobs they may take are woken for every
//! job of their queues.
//!
//! Without shared memory there is nothing to register in: the sleeper looks
//! again every POLL_INTERVAL_MS, still inside the server.
//!
//! The same commits (and the aborts of claims) also write where in the
//! claim's index the jobs they made runnable begin to the shared runnable
//! log, which consumers read to learn whether a job appeared behind where
//! their claims start (see claim_start.rs).

use std::cell::{Cell, OnceCell, RefCell};

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::place::Place;
use super::horizon;
use crate::shared::runnable_log;
use crate::shared::sleepers::{self, NAMED_QUEUES, ORDER};
use crate::text::Text;
use crate::xact;

/// How often a consumer looks for jobs while it waits without shared memory.
pub const POLL_INTERVAL_MS: i64 = 100;

/// A registered consumer's `until` while it looks rather than sleeps: a
/// claim's commit (which wakes sleepers that would sleep past its lease)
/// passes it by, and jobs wake it only after every sleeper of their queue.
/// Its look reads the lease of any claim committed before the look's
/// snapshot; a lease committed during the look is seen by a sleeper woken
/// for it, or at this consumer's next look (within its wait).
const LOOKING: i64 = 0;

/// Whether queues are named by 0.3.0's hash: the installed SQL is older
/// than 0.4.0. The update switches every waker to the keyed hash, which a
/// consumer waiting since before it does not carry, so such a consumer
/// looks again each second instead of waiting to be woken (consume.rs).
pub(crate) fn queues_named_as_0_3_0() -> bool {
    crate::version::table_oid(c"lock_key_secret") == pgrx::pg_sys::InvalidOid
}

/// A queue as sleepers, wakers and the runnable log name it: SipHash-1-3
/// keyed with the server's secret, drawn with the shared memory these live
/// in, so the same in every backend, and no tenant can pick a queue name
/// whose hash is another tenant's queue's (0.3.0's FNV-1a let a chosen name
/// wake another tenant's consumers with every job). 0 is kept for "any queue".
///
/// While the installed SQL is older than 0.4.0 (no `lock_key_secret` yet),
/// queues are named as 0.3.0's library names them, so that its sessions, on
/// 17+ without preload sharing these tables with this library's until the
/// update, still wake each other (after the update they may not claim).
pub(crate) fn queue_hash(queue: &[u8]) -> u32 {
    queue_hash_named(queue, queues_named_as_0_3_0())
}

/// [`queue_hash`], named as 0.3.0 names queues when `as_0_3_0`.
fn queue_hash_named(queue: &[u8], as_0_3_0: bool) -> u32 {
    let secret = crate::shared::server_secret().filter(|_| !as_0_3_0);
    let Some([k0, k1]) = secret else {
        // FNV-1a, 0.3.0's.
        return queue.iter().fold(0x811c_9dc5_u32, |h, b| (h ^ *b as u32).wrapping_mul(0x0100_0193)).max(1);
    };
    let mut hasher = siphasher::sip::SipHasher13::new_with_keys(k0, k1);
    std::hash::Hasher::write(&mut hasher, queue);
    (std::hash::Hasher::finish(&hasher) as u32).max(1)
}

/// A queue as the shared claim frontier names it (0: claims of every
/// queue): 64 bits of SipHash-1-3 under the server's secret, over a tag
/// and the name, so that two queues never share a frontier (one queue's
/// would skip the other's jobs) and the bits are not `queue_hash`'s. None
/// without the secret (no shared memory).
pub(crate) fn frontier_key(queue: Option<&crate::text::Text>) -> Option<u64> {
    let [k0, k1] = crate::shared::server_secret()?;
    let Some(queue) = queue else { return Some(0) };
    let mut hasher = siphasher::sip::SipHasher13::new_with_keys(k0, k1);
    std::hash::Hasher::write(&mut hasher, b"claim frontier\0");
    std::hash::Hasher::write(&mut hasher, queue.bytes());
    Some(std::hash::Hasher::finish(&hasher).max(1))
}

/// Wake-ups to send at the end of this transaction.
#[derive(Clone, Copy)]
struct Wake {
    /// The queue's hash; 0 for a job of any queue.
    queue: u32,
    count: usize,
    /// Only sleepers that would sleep past this time (a new lease's expiry).
    sleeping_past: Option<i64>,
    /// The earliest place of the jobs made runnable, for the runnable log.
    earliest: Option<Place>,
}

thread_local! {
    static AT_COMMIT: RefCell<Vec<Wake>> = const { RefCell::new(Vec::new()) };
    static REGISTERED: Cell<bool> = const { Cell::new(false) };
    /// This backend's entry while a Sleeper holds it, and the due time its
    /// last look learned: read by the exit callback when the backend ends
    /// without dropping the Sleeper (FATAL skips destructors).
    static ACTIVE: Cell<Option<(&'static sleepers::Sleeper, Option<Due>)>> = const { Cell::new(None) };
    static EXIT_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

fn add(list: &'static std::thread::LocalKey<RefCell<Vec<Wake>>>, wake: Wake) {
    note_change_for_prepare();
    if sleepers::table().is_none() {
        return;
    }
    list.with(|wakes| {
        let mut wakes = wakes.borrow_mut();
        match wakes.iter_mut().find(|w| w.queue == wake.queue && w.sleeping_past.is_some() == wake.sleeping_past.is_some()) {
            Some(w) => {
                w.count = w.count.saturating_add(wake.count);
                w.sleeping_past = w.sleeping_past.min(wake.sleeping_past);
                w.earliest = match (w.earliest, wake.earliest) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            None => wakes.push(wake),
        }
    });
    if !REGISTERED.with(Cell::get) {
        REGISTERED.with(|r| r.set(true));
        xact::after_commit(Box::new(|| send(&AT_COMMIT)));
        xact::at_prepare(Box::new(|| look_while_prepared(&AT_COMMIT)));
        xact::at_end(Box::new(|| {
            REGISTERED.with(|r| r.set(false));
            AT_COMMIT.with(|w| w.borrow_mut().clear());
        }));
    }
}

fn send(list: &'static std::thread::LocalKey<RefCell<Vec<Wake>>>) {
    let wakes = list.with(|w| std::mem::take(&mut *w.borrow_mut()));
    let log = runnable_log::log();
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    for wake in wakes {
        if let (Some(log), Some(earliest)) = (log, wake.earliest) {
            log.write(database, wake.queue, earliest.key());
        }
        wake_sleepers(wake);
    }
    old_library_sleepers();
}

/// A prepared transaction's jobs (enqueued, or claimed and given back by
/// ROLLBACK PREPARED) become runnable in a session that wakes nobody, maybe
/// long after. So every sleeper of its queues looks now: it finds the
/// prepared transaction and, while that lasts, looks once a second
/// (queue_next_due.sql); a sleeper that slept since before the PREPARE would
/// otherwise sleep to its deadline.
fn look_while_prepared(list: &'static std::thread::LocalKey<RefCell<Vec<Wake>>>) {
    let wakes = list.with(|w| std::mem::take(&mut *w.borrow_mut()));
    for wake in wakes {
        wake_sleepers(Wake { queue: wake.queue, count: usize::MAX, sleeping_past: None, earliest: None });
    }
    old_library_sleepers();
}

/// Backends still running a library from before the sleepers table sleep on
/// the database's condition variable (after an update without preload,
/// until they reconnect).
fn old_library_sleepers() {
    if let Some(slot) = crate::shared::queue_wake_slot(unsafe { pg_sys::MyDatabaseId }) {
        if slot.sleepers.load(ORDER) > 0 {
            unsafe { pg_sys::ConditionVariableBroadcast(std::ptr::addr_of!(slot.cv).cast_mut()) };
        }
    }
}

/// Sets the latches of sleepers of this database that take jobs of
/// `wake.queue` until their batches add up to `wake.count` jobs (and of
/// every restricted one among them).
fn wake_sleepers(wake: Wake) {
    let Some(table) = sleepers::table() else { return };
    if table.sleeping.load(ORDER) == 0 {
        return;
    }
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let entries = table.entries();
    // Start where the last wake-up left off, so that no sleeper is always first.
    let start = table.wakeups.load(ORDER) as usize % entries.len().max(1);
    let mut left = wake.count;
    // Those asleep first, then those looking (whose look may not see the jobs).
    let asleep_then_looking = (0..entries.len()).map(|n| (n, true)).chain((0..entries.len()).map(|n| (n, false)));
    for (n, asleep) in asleep_then_looking {
        let entry = &entries[(start + n) % entries.len()];
        if entry.live_pid().is_none() || entry.database.load(ORDER) != database || !takes(entry, wake.queue) {
            continue;
        }
        let until = entry.until.load(ORDER);
        if (until != LOOKING) != asleep || wake.sleeping_past.is_some_and(|t| until <= t) {
            continue;
        }
        let restricted = entry.restricted.load(ORDER);
        if left == 0 && !restricted {
            continue;
        }
        if entry.woken.swap(true, ORDER) {
            continue;
        }
        entry.woken_for.store(wake.queue, ORDER);
        sleepers::set_latch(entry.latch.load(ORDER));
        table.wakeups.fetch_add(1, ORDER);
        if !restricted {
            left = left.saturating_sub(entry.wants.load(ORDER).max(1) as usize);
        }
    }
}

fn takes(entry: &sleepers::Sleeper, queue: u32) -> bool {
    let count = entry.queue_count.load(ORDER) as usize;
    queue == 0 || count == 0 || entry.queues[..count.min(NAMED_QUEUES)].iter().any(|q| q.load(ORDER) == queue)
}

/// This transaction made `count` jobs of `queue` runnable (None: of queues
/// it does not know), the earliest in the claim's index at `earliest`:
/// wake that many sleepers once it commits.
pub fn jobs_added(queue: Option<&[u8]>, count: usize, earliest: Place) {
    if count > 0 {
        let queue = queue.map_or(0, queue_hash);
        add(&AT_COMMIT, Wake { queue, count, sleeping_past: None, earliest: Some(earliest) });
    }
}

/// The earliest place among the jobs of `queue` (hash; None: of any) that
/// this transaction made runnable so far: its own claims see them, but the
/// runnable log hears of them only at commit.
pub(crate) fn uncommitted_earliest(queue: Option<u32>) -> Option<Place> {
    AT_COMMIT.with(|wakes| {
        wakes
            .borrow()
            .iter()
            .filter(|wake| wake.queue == 0 || queue.is_none_or(|queue| queue == wake.queue))
            .filter_map(|wake| wake.earliest)
            .reduce(Place::min)
    })
}

/// This transaction claimed jobs (of `queue`, when it knows) with leases
/// running out at `lease_expiry`: at commit, wake one sleeper that would
/// sleep past that.
pub fn jobs_claimed(queue: Option<&[u8]>, lease_expiry: pg_sys::TimestampTz) {
    let queue = queue.map_or(0, queue_hash);
    add(&AT_COMMIT, Wake { queue, count: 1, sleeping_past: Some(lease_expiry), earliest: None });
}

/// What a claim statement gives back if the subtransaction it runs in
/// aborts (a savepoint rolled back too, whatever the transaction did before
/// it; a look failing in a later statement; the statement itself cancelled
/// or timed out after it locked its jobs): registered before the statement
/// runs, as jobs of its queue anywhere (review helper-79: a statement
/// cancelled after it locked its jobs left them behind the frontier), and
/// narrowed once it has returned. On abort the jobs are logged and as many
/// sleepers woken.
pub struct GivenBack(Option<std::rc::Rc<Cell<Option<(usize, Place)>>>>);

impl GivenBack {
    /// The statement claimed `count` jobs, the earliest at `earliest`.
    pub fn claimed(&self, count: usize, earliest: Place) {
        if let Some(cell) = &self.0 {
            cell.set(Some((count, earliest)));
        }
    }

    /// The statement claimed nothing: an abort gives nothing back.
    pub fn nothing(&self) {
        if let Some(cell) = &self.0 {
            cell.set(None);
        }
    }
}

/// Before a claim statement of `queue` (None: of any queue): see GivenBack.
pub fn claim_may_give_back(queue: Option<&[u8]>) -> GivenBack {
    note_change_for_prepare();
    if sleepers::table().is_none() && runnable_log::log().is_none() {
        return GivenBack(None);
    }
    let queue = queue.map_or(0, queue_hash);
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let pending = std::rc::Rc::new(Cell::new(Some((usize::MAX, Place::HEAD))));
    let on_abort = pending.clone();
    xact::on_outcome(
        None,
        Some(Box::new(move || {
            let Some((count, earliest)) = on_abort.get() else { return };
            if let Some(log) = runnable_log::log() {
                log.write(database, queue, earliest.key());
            }
            wake_sleepers(Wake { queue, count, sleeping_past: None, earliest: None });
            old_library_sleepers();
        })),
    );
    GivenBack(Some(pending))
}

/// This transaction is about to lock runnable jobs of `queue` (which claims
/// then skip) without a claim's own record: if it (or the subtransaction)
/// aborts, they stay runnable behind where claims passed, so the runnable
/// log is told that jobs of the queue may lie anywhere.
pub fn rows_held_until_end(queue: &[u8]) {
    note_change_for_prepare();
    let Some(log) = runnable_log::log() else { return };
    let (database, queue) = (unsafe { pg_sys::MyDatabaseId }.to_u32(), queue_hash(queue));
    xact::on_outcome(None, Some(Box::new(move || log.write(database, queue, Place::HEAD.key()))));
}

thread_local! {
    static PREPARE_NOTED: Cell<bool> = const { Cell::new(false) };
}

/// This transaction changed which jobs are runnable, or will at its end:
/// if it is prepared, COMMIT or ROLLBACK PREPARED (in any session, running
/// none of our hooks) ends it with no runnable log entry, so the claim
/// frontier is told (shared/claim_frontier.rs).
fn note_change_for_prepare() {
    // Nothing to note where no transaction can be prepared (the default):
    // spares every queue transaction two hooks.
    if !super::prepared::prepared_transactions_allowed()
        || crate::shared::claim_frontier::frontier().is_none()
        || PREPARE_NOTED.with(|noted| noted.replace(true))
    {
        return;
    }
    xact::at_prepare(Box::new(|| {
        if let Some(frontier) = crate::shared::claim_frontier::frontier() {
            // Still set at PREPARE's callbacks (cleared after them).
            frontier.prepared(unsafe { pg_sys::GetTopTransactionIdIfAny() });
        }
    }));
    xact::at_end(Box::new(|| PREPARE_NOTED.with(|noted| noted.set(false))));
}

/// Queue `queue` runs again (or its limit changed): wake all of its
/// sleepers at commit; its jobs may lie anywhere in the index.
pub fn queue_resumed(queue: &[u8]) {
    add(&AT_COMMIT, Wake { queue: queue_hash(queue), count: usize::MAX, sleeping_past: None, earliest: Some(Place::HEAD) });
}

/// When a job becomes claimable with time alone (a run_after coming, a
/// lease running out), and its queue (hash): what a sleeper's look learned
/// and the sleepers woken for it may not know.
#[derive(Clone, Copy)]
pub struct Due {
    pub at: pg_sys::TimestampTz,
    pub queue: u32,
}

/// A consumer between two looks at the queue. Made before the look that
/// precedes its first sleep, so that a commit landing between that look and
/// the sleep still wakes it.
pub struct Sleeper {
    entry: Option<&'static sleepers::Sleeper>,
    /// A wake-up its last look did not answer, passed on as it leaves.
    pass_on: Cell<Option<u32>>,
    /// Nothing reads with the calling statement's snapshot after the wait:
    /// it sleeps without holding back the xmin horizon. Found at its first sleep.
    releases_horizon: OnceCell<bool>,
    /// It named its queues as 0.3.0 does (registered before the update to
    /// 0.4.0 committed): wakers name them otherwise since, so it must look
    /// again each second for the rest of its wait (consume.rs).
    named_as_0_3_0: bool,
}

/// What woke a sleeper: a commit that made jobs of this queue (hash) runnable.
#[derive(Clone, Copy)]
pub struct WakeUp(u32);

impl Sleeper {
    /// A sleeper taking up to `batch` jobs of `queues` (None: every queue)
    /// per look; `restricted` when a scope limits which jobs it may take
    /// (as it is when it names more queues than an entry holds).
    pub fn new(queues: Option<&[Text]>, restricted: bool, batch: i32) -> Self {
        let Some(table) = sleepers::table() else { return Sleeper::in_entry(None) };
        // Before an entry is taken: registering can fail (too many exit
        // callbacks), and must not leave the entry held.
        register_exit_callback();
        let me = unsafe { pg_sys::MyProcPid };
        // A free entry, or one whose backend is gone without clearing it.
        let entry = table.entries().iter().find(|entry| {
            let pid = entry.pid.load(ORDER);
            let free = pid == 0 || (pid > 0 && entry.live_pid().is_none());
            free && entry.pid.compare_exchange(pid, -1, ORDER, ORDER).is_ok()
        });
        let Some(entry) = entry else { return Sleeper::in_entry(None) };
        entry.latch.store(sleepers::my_latch(), ORDER);
        entry.database.store(unsafe { pg_sys::MyDatabaseId }.to_u32(), ORDER);
        let named = queues.filter(|queues| queues.len() <= NAMED_QUEUES).unwrap_or(&[]);
        // Read once: an update committing while this registers must not
        // leave some queues named one way and the others the other.
        let as_0_3_0 = queues_named_as_0_3_0();
        for (slot, queue) in entry.queues.iter().zip(named) {
            slot.store(queue_hash_named(queue.bytes(), as_0_3_0), ORDER);
        }
        entry.queue_count.store(named.len() as u32, ORDER);
        // Too many queues to name: the entry reads as a sleeper of every
        // queue, which it is not, so like a scoped one it is woken on top of
        // the count and never taken to know a due time (known_by_a_sleeper).
        let unnamed = queues.is_some_and(|queues| queues.len() > NAMED_QUEUES);
        entry.restricted.store(restricted || unnamed, ORDER);
        entry.wants.store(batch.max(1) as u32, ORDER);
        entry.woken.store(false, ORDER);
        entry.until.store(LOOKING, ORDER);
        ACTIVE.set(Some((entry, None)));
        entry.pid.store(me, ORDER);
        table.sleeping.fetch_add(1, ORDER);
        let mut sleeper = Sleeper::in_entry(Some(entry));
        sleeper.named_as_0_3_0 = as_0_3_0 && !named.is_empty();
        sleeper
    }

    /// Whether it named its queues as 0.3.0 does (see the field).
    pub fn named_as_0_3_0(&self) -> bool {
        self.named_as_0_3_0
    }

    /// A sleeper registered in `entry`; None: one that polls, with nothing to register in.
    fn in_entry(entry: Option<&'static sleepers::Sleeper>) -> Self {
        Sleeper { entry, pass_on: Cell::new(None), releases_horizon: OnceCell::new(), named_as_0_3_0: false }
    }

    /// The look after `wake_up` filled its batch before it tried the queues
    /// `untried`. When the wake-up was for one of them, no other sleeper of
    /// that queue was woken for its jobs: this one passes the wake-up on as
    /// it leaves, rather than leave them to a sleeper's deadline.
    pub fn answered_without(&self, wake_up: WakeUp, untried: &[Text]) {
        if untried.iter().any(|queue| queue_hash(queue.bytes()) == wake_up.0) {
            self.pass_on.set(Some(wake_up.0));
        }
    }

    /// What this sleeper's last look that found nothing learned of the next
    /// job due with time: the sleepers woken for that job (one, by the
    /// commit that made it) may be this one alone, so whoever leaves
    /// knowing it tells another sleeper of its queue (as the backend exits
    /// too), or it would wait for their deadlines.
    pub fn learned(&self, due: Option<Due>) {
        if let Some(entry) = self.entry {
            ACTIVE.set(Some((entry, due)));
        }
    }

    /// Sleeps up to `ms` milliseconds, less when woken (then what woke it);
    /// raises on cancel, statement_timeout or termination, and ends the
    /// backend when its client is gone (a consumer nobody waits for must
    /// not claim).
    pub fn sleep(&self, ms: i64) -> Option<WakeUp> {
        let ms = match self.entry {
            Some(entry) => {
                let ms = ms.clamp(1, i32::MAX as i64);
                let now = unsafe { pg_sys::GetCurrentTimestamp() };
                entry.until.store(now.saturating_add(ms * 1000), ORDER);
                ms
            }
            None => ms.clamp(1, POLL_INTERVAL_MS),
        };
        let releases_horizon = *self.releases_horizon.get_or_init(horizon::statement_snapshot_unused_after_wait);
        if releases_horizon {
            unsafe { horizon::release_xmin() };
        }
        let client_gone = crate::client_connection::wait_latch(ms, crate::pg_compat::queue_wait_event());
        // Looking now: a wake-up from here on is a new one.
        if let Some(entry) = self.entry {
            entry.until.store(LOOKING, ORDER);
        }
        // Before the wake-up is taken: a consumer cancelled, terminated or
        // left by its client leaves it set, and its drop (or, for FATAL,
        // the exit callback) passes it on.
        if client_gone {
            crate::client_connection::leave_as_client_lost();
        }
        check_for_interrupts!();
        let woken = self.entry.filter(|entry| entry.woken.swap(false, ORDER));
        woken.map(|entry| WakeUp(entry.woken_for.load(ORDER)))
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let Some(entry) = self.entry else { return };
        let due = ACTIVE.get().and_then(|(_, due)| due);
        leave(entry, self.pass_on.get(), due);
    }
}

/// Frees `entry`, passing on what its sleeper leaves undone: a wake-up it
/// did not answer, one for a queue its look did not reach (`pass_on`), and
/// a due time it knew (`due`), to another sleeper that would sleep past it.
fn leave(entry: &'static sleepers::Sleeper, pass_on: Option<u32>, due: Option<Due>) {
    ACTIVE.set(None);
    let unanswered = entry.woken.load(ORDER).then(|| entry.woken_for.load(ORDER));
    let wanted = entry.wants.load(ORDER).max(1) as usize;
    entry.pid.store(0, ORDER);
    if let Some(table) = sleepers::table() {
        table.sleeping.fetch_sub(1, ORDER);
    }
    for queue in unanswered.into_iter().chain(pass_on.filter(|queue| Some(*queue) != unanswered)) {
        wake_sleepers(Wake { queue, count: wanted, sleeping_past: None, earliest: None });
    }
    if let Some(due) = due.filter(|due| !known_by_a_sleeper(*due)) {
        wake_sleepers(Wake { queue: due.queue, count: 1, sleeping_past: Some(due.at), earliest: None });
    }
}

/// Whether a sleeper of this database that takes `due`'s queue looks by
/// then anyway (and so learns of it).
fn known_by_a_sleeper(due: Due) -> bool {
    let Some(table) = sleepers::table() else { return true };
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    table.entries().iter().any(|entry| {
        let until = entry.until.load(ORDER);
        until != LOOKING
            && until <= due.at
            && entry.live_pid().is_some()
            && entry.database.load(ORDER) == database
            // A restricted sleeper's look may not reach the due job's queue.
            && !entry.restricted.load(ORDER)
            && takes(entry, due.queue)
    })
}

/// Registers (once per backend) the callback that frees this backend's
/// entry (ACTIVE) when it exits while it holds one.
fn register_exit_callback() {
    if !EXIT_CALLBACK.get() {
        unsafe { pg_sys::before_shmem_exit(Some(leave_on_exit), pg_sys::Datum::from(0)) };
        EXIT_CALLBACK.set(true);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn leave_on_exit(_code: std::ffi::c_int, _arg: pg_sys::Datum) {
    if let Some((entry, due)) = ACTIVE.get() {
        if entry.pid.load(ORDER) == unsafe { pg_sys::MyProcPid } {
            leave(entry, None, due);
        }
    }
}

/// Consumers of this database waiting for jobs now, and the wake-ups
/// commits have sent to waiting consumers since the server started (all
/// databases); NULLs without shared memory.
#[pg_extern(volatile, parallel_restricted)]
fn queue_wait_stats() -> TableIterator<'static, (name!(sleeping, Option<i32>), name!(wakeups, Option<i64>))> {
    let Some(table) = sleepers::table() else { return TableIterator::once((None, None)) };
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let sleeping = table
        .entries()
        .iter()
        .filter(|entry| entry.live_pid().is_some() && entry.database.load(ORDER) == database)
        .count();
    TableIterator::once((Some(sleeping as i32), Some(table.wakeups.load(ORDER) as i64)))
}
