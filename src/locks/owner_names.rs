//! The owner each backend published (`distlock.owner`), for
//! `distlock.lock_waits`: what lets a console or the CLI join a client's
//! connections into one node of the wait-for graph and mark a deadlock that
//! runs through several of them, which PostgreSQL's graph never shows.

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::scopes::{of_caller, Capability};
use crate::shared::lock_owners::{self as table, PublishedOwner, ORDER};
use crate::text::Text;

/// The owner backend `p_pid` of this database published when it last took
/// or waited for a pg_distlock lock; NULL when it has none (it is its own
/// owner), is not connected here, or nothing is published (no shared
/// memory). A name outside the caller's monitor scope reads
/// `owner#<16 hex digits>`, the same for every connection of one owner, so
/// that a scoped monitor still sees which connections are one owner without
/// learning another tenant's worker ids. A name longer than the entry keeps
/// is cut and ends `...#<16 hex digits>`, so that two long names never read
/// alike. `distlock.lock_waits` calls it through `distlock.lock_owner`.
#[pg_extern(volatile, parallel_restricted)]
fn lock_owner_published(p_pid: Option<i32>) -> Option<Text> {
    let pid = p_pid?;
    let owner = published_by(pid)?;
    let hash = format!("#{:016x}", owner.hash);
    if !of_caller(Capability::Monitor).admits(&owner.kept) {
        return Some(Text::from(format!("owner{hash}").as_str()));
    }
    let mut shown = owner.kept;
    if owner.cut {
        shown.extend_from_slice(b"...");
        shown.extend_from_slice(hash.as_bytes());
    }
    Some(Text::from(&shown[..]))
}

/// The owner in `pid`'s entry, read whole and as valid text of the
/// database encoding, while `pid` still has the entry.
fn published_by(pid: i32) -> Option<PublishedOwner> {
    let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
    let entry = table::table()?
        .entries()
        .iter()
        .find(|e| e.pid.load(ORDER) == pid && e.database.load(ORDER) == database)?;
    let owner = entry.published_owner()?;
    let valid = unsafe { pg_sys::pg_verifymbstr(owner.kept.as_ptr().cast(), owner.kept.len() as i32, true) };
    (valid && entry.pid.load(ORDER) == pid).then_some(owner)
}
