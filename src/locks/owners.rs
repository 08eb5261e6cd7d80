//! Publishing this backend's owner (`distlock.owner`), the pg_distlock
//! locks it holds and the one it waits for, in its entry of the shared
//! owner table (shared/lock_owners.rs), for the owner-level deadlock check
//! (owner_wait.rs). Without shared memory nothing is published.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::Hasher;

use pgrx::pg_sys;

use crate::shared::lock_owners::{self as table, OwnerEntry, ORDER, OWNER_BYTES};

thread_local! {
    /// Holds per (key, shared), as taken through lock calls.
    static HELD: RefCell<HashMap<(i64, bool), u32>> = RefCell::new(HashMap::new());
    /// The login role and owner last written to the entry.
    static PUBLISHED_OWNER: RefCell<Option<(u32, Vec<u8>)>> = const { RefCell::new(None) };
    static EXIT_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// The node of an owner's name: its keyed hash with the top bit clear (a
/// backend without an owner is its own node, the top bit set), never 0.
/// The session's login role is part of it: an owner is one client of one
/// login, so that another login (another tenant) naming itself alike
/// neither joins its node (confirming a guess of the name by a quick
/// 40P01) nor makes that owner's waiters victims. Not current_user: a
/// rollback restores GUCs in name order, distlock.owner before role, so
/// the assign hook would hash the restored owner with the rolled-back
/// role; and a session that can SET ROLE to two tenants can act as both.
fn owner_hash(name: &[u8]) -> u64 {
    if name.is_empty() {
        return 0;
    }
    let secret = crate::shared::server_secret().unwrap_or([0, 0]);
    let mut hasher = siphasher::sip::SipHasher13::new_with_keys(secret[0], secret[1]);
    hasher.write_u32(login_role());
    hasher.write(name);
    (hasher.finish() & !(1 << 63)).max(1)
}

/// session_user: the login role, changed only by a superuser's SET
/// SESSION AUTHORIZATION (taken up at the next lock call).
fn login_role() -> u32 {
    unsafe { pg_sys::GetSessionUserId() }.to_u32()
}

/// The node of a connection: its owner's hash, or its pid's own node.
pub fn node_of(owner_hash: u64, pid: i32) -> u64 {
    if owner_hash != 0 {
        owner_hash
    } else {
        (1 << 63) | pid as u32 as u64
    }
}

fn current_owner() -> Vec<u8> {
    crate::gucs::OWNER
        .get()
        .map(|o| o.to_bytes().to_vec())
        .unwrap_or_default()
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn clear_at_exit(_code: i32, _arg: pg_sys::Datum) {
    if let Some(entry) = table::attached_table().and_then(table::my_entry) {
        entry.wait_mode.store(0, ORDER);
        for held in &entry.held {
            held.mode.store(0, ORDER);
        }
        entry.overflowed.store(false, ORDER);
        entry.write_owner(0, &[], false);
        entry.pid.store(0, ORDER);
    }
}

/// How many bytes of `owner` the entry keeps: whole characters of the
/// database encoding, so that the views show valid text.
fn kept_owner_bytes(owner: &[u8]) -> usize {
    if owner.len() <= OWNER_BYTES {
        return owner.len();
    }
    let mut kept = unsafe {
        pg_sys::pg_mbcliplen(owner.as_ptr().cast(), owner.len().min(i32::MAX as usize) as i32, OWNER_BYTES as i32)
    } as usize;
    // SQL_ASCII keeps whatever bytes clients send, most often UTF-8, and
    // pg_mbcliplen counts its bytes as characters: a cut inside a UTF-8
    // character would leave text no UTF-8 client can read (22021).
    if crate::text::is_sql_ascii_database() {
        while kept > 0 && owner[kept] & 0xC0 == 0x80 {
            kept -= 1;
        }
    }
    kept
}

/// Writes `owner` into the entry as its owner.
fn publish_owner(entry: &OwnerEntry, owner: &[u8]) {
    let kept = kept_owner_bytes(owner);
    entry.write_owner(owner_hash(owner), &owner[..kept], kept < owner.len());
}

/// distlock.owner's assign hook: a backend that has published its entry
/// publishes a new owner at once (SET, RESET, a pooler's DISCARD ALL, a
/// transaction's rollback of SET LOCAL), so that the views never show a
/// pooled connection's wait as its previous client's. A backend that has
/// published nothing has nothing to change (and must not attach shared
/// memory from a hook: it may run at startup, or in the postmaster).
pub fn owner_assigned(owner: &[u8]) {
    let Some(entry) = table::attached_table().and_then(table::my_entry) else { return };
    if entry.pid.load(ORDER) != unsafe { pg_sys::MyProcPid } {
        return;
    }
    publish_owner(entry, owner);
    PUBLISHED_OWNER.with(|published| *published.borrow_mut() = Some((login_role(), owner.to_vec())));
}

/// This backend's entry with its pid, database and current owner written.
fn entry() -> Option<&'static OwnerEntry> {
    let entry = table::my_entry(table::table()?)?;
    if !EXIT_CALLBACK.get() {
        unsafe { pg_sys::before_shmem_exit(Some(clear_at_exit), pg_sys::Datum::from(0)) };
        EXIT_CALLBACK.set(true);
    }
    let pid = unsafe { pg_sys::MyProcPid };
    if entry.pid.load(ORDER) != pid {
        entry
            .database
            .store(unsafe { pg_sys::MyDatabaseId }.to_u32(), ORDER);
        entry.pid.store(pid, ORDER);
        PUBLISHED_OWNER.with(|o| *o.borrow_mut() = None);
    }
    // Again after SET SESSION AUTHORIZATION too: the login is part of the owner.
    let current = (login_role(), current_owner());
    PUBLISHED_OWNER.with(|published| {
        if published.borrow().as_ref() != Some(&current) {
            publish_owner(entry, &current.1);
            *published.borrow_mut() = Some(current);
        }
    });
    Some(entry)
}

/// Writes the (key, mode) pairs this backend holds into its entry (the
/// first HELD_PER_BACKEND of them; a key held both ways takes a slot per
/// mode, so that a stale mark on one does not hide the other).
fn publish_holds(entry: &OwnerEntry) {
    HELD.with(|held| {
        let held = held.borrow();
        let mut listed = held.keys().map(|&(key, shared)| (key, if shared { 1 } else { 2 }));
        for slot in &entry.held {
            match listed.next() {
                Some((key, mode)) => slot.write(key, mode),
                None if slot.mode.load(ORDER) != 0 => slot.write(0, 0),
                None => {}
            }
        }
        entry.overflowed.store(listed.next().is_some(), ORDER);
    });
}

/// The lock manager granted `key` in this mode to a backend that held it
/// in that mode not at all: a count left from holds dropped behind
/// pg_distlock's back (DISCARD ALL, pg_advisory_unlock_all) is forgotten,
/// so that the grant is published as a new listing (clearing a stale mark).
pub fn first_hold(key: i64, shared: bool) {
    HELD.with(|held| {
        held.borrow_mut().remove(&(key, shared));
    });
}

/// A hold of `key` was granted.
pub fn took(key: i64, shared: bool) {
    let Some(entry) = entry() else { return };
    let first = HELD.with(|held| {
        let mut held = held.borrow_mut();
        let count = held.entry((key, shared)).or_insert(0);
        *count += 1;
        *count == 1
    });
    if first {
        publish_holds(entry);
    }
}

/// `n` holds of `key` ended (all of them when `n` is None).
pub fn gave_back(key: i64, shared: bool, n: Option<u32>) {
    let ended = HELD.with(|held| {
        let mut held = held.borrow_mut();
        match (held.get_mut(&(key, shared)), n) {
            (Some(count), Some(n)) if *count > n => {
                *count -= n;
                false
            }
            (Some(_), _) => {
                held.remove(&(key, shared));
                true
            }
            (None, _) => false,
        }
    });
    if ended {
        if let Some(entry) = table::attached_table().and_then(table::my_entry) {
            publish_holds(entry);
        }
    }
}

/// Marks this backend waiting for `key`; returns the wait's order (`again`,
/// for a wait taken up again, keeps its first one), None without shared
/// memory.
pub fn begin_wait(key: i64, shared: bool, again: Option<u64>) -> Option<u64> {
    let entry = entry()?;
    let seq = match again {
        Some(seq) => seq,
        None => table::table()?.next_wait_seq.fetch_add(1, ORDER) + 1,
    };
    entry.wait_mode.store(0, ORDER);
    entry.wait_key.store(key, ORDER);
    entry.wait_seq.store(seq, ORDER);
    entry.wait_mode.store(if shared { 1 } else { 2 }, ORDER);
    Some(seq)
}

/// This backend no longer waits.
pub fn end_wait() {
    if let Some(entry) = table::attached_table().and_then(table::my_entry) {
        entry.wait_mode.store(0, ORDER);
    }
}
