//! The owner each backend published (`distlock.owner`), for
//! `distlock.lock_waits`: what lets a console or the CLI join a client's
//! connections into one node of the wait-for graph and mark a deadlock that
//! runs through several of them, which PostgreSQL's graph never shows.

use std::hash::Hasher;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::scopes::{of_caller, Capability};
use crate::shared::lock_owners::{self as table, PublishedOwner, ORDER};
use crate::text::Text;

/// The owner backend `p_pid` of this database published (it sets
/// `distlock.owner`, and holds or waits for a pg_distlock lock); NULL when
/// it has none, holds and waits for nothing of pg_distlock's, is not
/// connected here, is a session `pg_stat_activity` hides from the caller
/// (another role's, without `pg_read_all_stats`), has an owner whose name
/// lies outside the caller's monitor scope, or when nothing is published
/// (no shared memory). A name longer than the entry keeps is cut at a whole
/// character and ends `...#<16 hex digits>`; one that is not valid text of
/// the database encoding has its other bytes as `\xNN` and ends the same
/// way: so two owners never read alike. `distlock.lock_waits` calls it
/// through `distlock.lock_owner`.
#[pg_extern(volatile, parallel_restricted)]
fn lock_owner_published(p_pid: Option<i32>) -> Option<Text> {
    let pid = p_pid?;
    let owner = published_by(pid)?;
    // A scoped monitor sees the names in its scope, no stand-in for the
    // others: any label that is the same for one owner's connections would
    // let it confirm a guess of another tenant's name (it can publish the
    // guess itself and compare).
    if !of_caller(Capability::Monitor).admits(&owner.kept) {
        return None;
    }
    Some(Text::from(&shown(&owner)[..]))
}

/// The entry of `pid` when it is a backend of this database whose activity
/// the caller may see, read whole while `pid` still has it, and only while
/// it lists a hold or a wait.
fn published_by(pid: i32) -> Option<PublishedOwner> {
    let table = table::table()?;
    // SAFETY: BackendPidGetProc takes ProcArrayLock; the PGPROC stays in
    // shared memory (its contents may change: the pid is checked again).
    let proc = unsafe { pg_sys::BackendPidGetProc(pid) };
    if proc.is_null() || unsafe { (*proc).databaseId } != unsafe { pg_sys::MyDatabaseId } {
        return None;
    }
    let role = unsafe { (*proc).roleId };
    let me = unsafe { pg_sys::GetUserId() };
    let visible = unsafe {
        pg_sys::has_privs_of_role(me, role)
            || pg_sys::has_privs_of_role(me, pg_sys::Oid::from(pg_sys::ROLE_PG_READ_ALL_STATS))
    };
    if !visible {
        return None;
    }
    let index = unsafe { proc.offset_from((*pg_sys::ProcGlobal).allProcs) };
    let entry = table.entries().get(usize::try_from(index).ok()?)?;
    if entry.pid.load(ORDER) != pid || !entry.lists_anything() {
        return None;
    }
    let owner = entry.published_owner()?;
    (entry.pid.load(ORDER) == pid).then_some(owner)
}

/// The name as shown: as kept when whole and valid; otherwise what is valid
/// of it, marked with a tag of the whole name.
fn shown(owner: &PublishedOwner) -> Vec<u8> {
    let valid = if crate::text::is_sql_ascii_database() {
        // SQL_ASCII takes any bytes, but a UTF-8 client refuses what is not
        // UTF-8 (22021) for the whole result: that much is asked here.
        std::str::from_utf8(&owner.kept).is_ok()
    } else {
        unsafe { pg_sys::pg_verifymbstr(owner.kept.as_ptr().cast(), owner.kept.len() as i32, true) }
    };
    if valid && !owner.cut {
        return owner.kept.clone();
    }
    let mut shown = if valid {
        owner.kept.clone()
    } else {
        // ASCII is valid in every server encoding.
        owner
            .kept
            .iter()
            .flat_map(|&b| {
                if b.is_ascii_graphic() || b == b' ' { vec![b] } else { format!("\\x{b:02x}").into_bytes() }
            })
            .collect()
    };
    shown.extend_from_slice(format!("...#{:016x}", tag(owner.hash)).as_bytes());
    shown
}

/// A tag of an owner's hash under a key of its own: the owner hash is the
/// server secret's SipHash of the name, as other names' hashes are (a
/// queue's wake hash), so showing it would let a caller compute those.
fn tag(owner_hash: u64) -> u64 {
    let secret = crate::shared::server_secret().unwrap_or([0, 0]);
    let mut hasher = siphasher::sip::SipHasher13::new_with_keys(
        secret[0] ^ 0x6f77_6e65_722d_7461, // "owner-ta"
        secret[1] ^ 0x672d_6b65_792d_7631, // "g-key-v1"
    );
    hasher.write_u64(owner_hash);
    hasher.finish()
}
