//! Rate-limit state in shared memory: open addressing inside LWLock
//! partitions, keyed by md5(kind, key). A slot whose state has expired is
//! reused by the next new key that probes past it.

use md5::{Digest, Md5};
use pgrx::PgSqlErrorCode;

use super::logic::Window;
use crate::errors::raise_with_hint;
use crate::text::Text;
use crate::shared::{self, RateEntry};

/// How many slots a lookup inspects before declaring the partition full.
const MAX_PROBE: usize = 64;

#[derive(Clone, Copy)]
pub enum Kind {
    Window = 1,
    Gcra = 2,
}

/// Shared memory is server-wide; the database is part of the key, as each
/// database has its own table-mode state too.
pub fn hash_key(kind: Kind, key: &Text) -> [u8; 16] {
    let mut hasher = Md5::new();
    hasher.update([kind as u8]);
    hasher.update(unsafe { pgrx::pg_sys::MyDatabaseId }.to_u32().to_le_bytes());
    hasher.update(key.bytes());
    hasher.finalize().into()
}

enum Slot {
    Found(usize),
    Free(usize),
    Full,
}

fn probe(entries: &[RateEntry], key: &[u8; 16], now_us: i64) -> Slot {
    let len = entries.len();
    let mut start_bytes = [0u8; 8];
    start_bytes.copy_from_slice(&key[1..9]);
    let start = (u64::from_le_bytes(start_bytes) % len as u64) as usize;
    let mut reusable = None;
    for step in 0..MAX_PROBE.min(len) {
        let i = (start + step) % len;
        let entry = &entries[i];
        if !entry.in_use {
            return Slot::Free(reusable.unwrap_or(i));
        }
        if entry.key == *key {
            return Slot::Found(i);
        }
        if reusable.is_none() && entry.expires_at_us <= now_us {
            reusable = Some(i);
        }
    }
    reusable.map_or(Slot::Full, Slot::Free)
}

fn raise_full() -> ! {
    raise_with_hint(
        PgSqlErrorCode::ERRCODE_INSUFFICIENT_RESOURCES,
        format!(
            "pg_distlock rate limiter is full (distlock.rate_limit_capacity = {})",
            crate::gucs::RATE_LIMIT_CAPACITY.get()
        ),
        "Raise distlock.rate_limit_capacity (needs a restart) or use fewer live keys.",
    )
}

/// Runs `f` on the entry for `key` (a fresh one if absent or expired) under
/// the partition lock. `f` returns whether to keep its changes.
pub fn with_entry<R>(key: &[u8; 16], now_us: i64, f: impl FnOnce(&mut RateEntry, bool) -> R) -> Option<R> {
    shared::with_rate_partition(key, |entries| {
        let (i, existing) = match probe(entries, key, now_us) {
            Slot::Found(i) => (i, entries[i].expires_at_us > now_us),
            Slot::Free(i) => (i, false),
            Slot::Full => raise_full(),
        };
        let entry = &mut entries[i];
        if !existing {
            *entry = RateEntry { key: *key, in_use: true, ..RateEntry::default() };
        }
        f(entry, existing)
    })
}

/// Reads the live entry for `key`, if any, without creating one.
pub fn peek(key: &[u8; 16], now_us: i64) -> Option<RateEntry> {
    shared::with_rate_partition(key, |entries| match probe(entries, key, now_us) {
        Slot::Found(i) if entries[i].expires_at_us > now_us => Some(entries[i]),
        _ => None,
    })
    .flatten()
}

/// Forgets `key`; true if it had live state.
pub fn forget(key: &[u8; 16], now_us: i64) -> bool {
    shared::with_rate_partition(key, |entries| match probe(entries, key, now_us) {
        Slot::Found(i) => {
            let live = entries[i].expires_at_us > now_us;
            entries[i].expires_at_us = i64::MIN;
            live
        }
        _ => false,
    })
    .unwrap_or(false)
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
