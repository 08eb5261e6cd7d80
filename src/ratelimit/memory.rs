//! Rate-limit state in shared memory (`shared::rate_table`): a key is
//! found by SipHash-1-3 of (kind, database, key) keyed with the table's
//! secret, which is drawn when the server makes the table and never leaves
//! it, so no caller can compute keys that land where another key lives.

use pgrx::PgSqlErrorCode;
use siphasher::sip128::{Hasher128, SipHasher13};
use std::hash::Hasher;

use super::logic::Window;
use super::placement::{self, Refusal};
use crate::errors::raise_with_hint;
use crate::shared::rate_table::{self, RateEntry, KEPT_KEY_BYTES};
use crate::shared::RATE_PARTITIONS;
use crate::text::Text;

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Window = 1,
    Gcra = 2,
}

impl Kind {
    pub fn name(code: u8) -> &'static str {
        if code == Kind::Window as u8 {
            "window"
        } else {
            "gcra"
        }
    }
}

fn database() -> u32 {
    unsafe { pgrx::pg_sys::MyDatabaseId }.to_u32()
}

/// Where a key lives: its keyed hash and partition. None without shared memory.
struct Place {
    hash: [u8; 16],
    partition: usize,
}

fn place_of(kind: Kind, key: &Text) -> Option<Place> {
    let [k0, k1] = crate::shared::server_secret()?;
    let mut hasher = SipHasher13::new_with_keys(k0, k1);
    hasher.write_u8(kind as u8);
    hasher.write(&database().to_le_bytes());
    hasher.write(key.bytes());
    let hash = hasher.finish128().as_bytes();
    Some(Place { hash, partition: hash[0] as usize % RATE_PARTITIONS })
}

/// Entries one database may hold per partition: its share of the
/// partition's slots, rounded down, at least one. With one slot per
/// partition (the smallest capacity, 16) that slot is the whole partition,
/// and the share cannot keep databases apart.
fn share_limit(slots: usize) -> u32 {
    let share = crate::gucs::RATE_LIMIT_DATABASE_SHARE.get().clamp(1, 100) as usize;
    (slots * share / 100).max(1) as u32
}

fn raise_refused(refusal: Refusal) -> ! {
    let capacity = crate::gucs::RATE_LIMIT_CAPACITY.get();
    match refusal {
        Refusal::Full => raise_with_hint(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_RESOURCES,
            format!("pg_distlock rate limiter is full (distlock.rate_limit_capacity = {capacity})"),
            "Raise distlock.rate_limit_capacity (needs a restart) or use fewer live keys.",
        ),
        Refusal::Share => raise_with_hint(
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_RESOURCES,
            format!(
                "this database holds its share of pg_distlock's rate limiter \
                 (distlock.rate_limit_database_share = {} % of distlock.rate_limit_capacity = {capacity})",
                crate::gucs::RATE_LIMIT_DATABASE_SHARE.get()
            ),
            "Raise distlock.rate_limit_database_share or distlock.rate_limit_capacity, use fewer live keys, \
             or let an admin look at distlock.rate_limit_keys() and reset_rate_limits().",
        ),
    }
}

/// The first bytes of `key` that end on a character boundary. A SQL_ASCII
/// database checks no encoding, and its text is most often UTF-8: the cut
/// backs off to a UTF-8 boundary there too.
fn kept_len(key: &Text) -> usize {
    let bytes = key.bytes();
    if bytes.len() <= KEPT_KEY_BYTES {
        return bytes.len();
    }
    let sql_ascii = unsafe { pgrx::pg_sys::GetDatabaseEncoding() } == pgrx::pg_sys::pg_enc::PG_SQL_ASCII as i32;
    if sql_ascii {
        // A UTF-8 character is at most 4 bytes: back off over at most 3
        // continuation bytes to its lead byte; bytes that are no UTF-8 are
        // cut where they are.
        let mut kept = KEPT_KEY_BYTES;
        while kept > KEPT_KEY_BYTES - 3 && bytes[kept] & 0xc0 == 0x80 {
            kept -= 1;
        }
        return if kept < KEPT_KEY_BYTES && bytes[kept] >= 0xc0 { kept } else { KEPT_KEY_BYTES };
    }
    unsafe { pgrx::pg_sys::pg_mbcliplen(bytes.as_ptr().cast(), bytes.len() as i32, KEPT_KEY_BYTES as i32) as usize }
}

/// Runs `f` on the entry for `key` (a fresh one if absent or expired) under
/// the partition lock; None without shared memory. `f` is told whether the
/// entry had live state.
pub fn with_entry<R>(kind: Kind, key: &Text, now_us: i64, f: impl FnOnce(&mut RateEntry, bool) -> R) -> Option<R> {
    let place = place_of(kind, key)?;
    rate_table::with_partition(place.partition, |state, entries| {
        match placement::find(state, entries, &place.hash) {
            Some(i) if entries[i].expires_at_us > now_us => return f(&mut entries[i], true),
            // An expired entry of the key starts over like a new key.
            Some(i) => placement::free(state, entries, i),
            None => placement::shorten_probes(state, entries, now_us),
        }
        let i = placement::place(state, entries, &place.hash, database(), now_us, share_limit(entries.len()))
            .unwrap_or_else(|refusal| raise_refused(refusal));
        let entry = &mut entries[i];
        let kept = kept_len(key);
        entry.kind = kind as u8;
        entry.key_len = key.bytes().len().min(u16::MAX as usize) as u16;
        entry.kept_len = kept as u16;
        entry.key_text[..kept].copy_from_slice(&key.bytes()[..kept]);
        f(entry, false)
    })
}

/// Reads the live entry for `key`, if any, without creating one.
pub fn peek(kind: Kind, key: &Text, now_us: i64) -> Option<RateEntry> {
    let place = place_of(kind, key)?;
    rate_table::with_partition(place.partition, |state, entries| {
        placement::find(state, entries, &place.hash).map(|i| entries[i]).filter(|e| e.expires_at_us > now_us)
    })
    .flatten()
}

/// Forgets `key`; true if it had live state.
pub fn forget(kind: Kind, key: &Text, now_us: i64) -> bool {
    let Some(place) = place_of(kind, key) else { return false };
    rate_table::with_partition(place.partition, |state, entries| {
        placement::find(state, entries, &place.hash).is_some_and(|i| {
            let live = entries[i].expires_at_us > now_us;
            placement::free(state, entries, i);
            live
        })
    })
    .unwrap_or(false)
}

/// Runs `f` on every entry in use of this database, partition by
/// partition (each under its lock); `f` returns whether to free the entry.
pub fn each_of_this_database(mut f: impl FnMut(&RateEntry) -> bool) {
    let database = database();
    for partition in 0..RATE_PARTITIONS {
        rate_table::with_partition(partition, |state, entries| {
            for i in 0..entries.len() {
                if entries[i].in_use && entries[i].database == database && f(&entries[i]) {
                    placement::free(state, entries, i);
                }
            }
        });
    }
}

pub fn window_of(entry: &RateEntry) -> Window {
    Window {
        start_us: entry.window_start_us,
        length_us: entry.window_us,
        count: entry.count,
        max_requests: entry.max_requests,
    }
}

pub fn store_window(entry: &mut RateEntry, window: Window) {
    entry.window_start_us = window.start_us;
    entry.window_us = window.length_us;
    entry.count = window.count;
    entry.max_requests = window.max_requests;
    entry.expires_at_us = window.end_us();
}
