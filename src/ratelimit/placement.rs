//! Where a key lives in one partition of the shared rate-limit table:
//! linear probing from the key's home slot (from its keyed hash), with
//! the partition's `max_probe` bounding lookups, so that expired entries
//! can be freed anywhere without ending anyone's probe early.
//!
//! A new key takes the first slot from its home that is free or expired,
//! however far: the partition refuses a key only when every slot holds a
//! live key (issue 44, item 3: 0.3.0 looked at 64 slots and refused, so 64
//! crafted keys denied one chosen key). And one database may hold at most
//! `limit` entries of a partition (its share, `distlock.rate_limit_database_share`).
//! Counting them is kept cheap by `PartitionState::databases`: exact
//! counts for the few databases seen in the partition.

use crate::shared::rate_table::{DatabaseCount, PartitionState, RateEntry};

pub fn home(hash: &[u8; 16], slots: usize) -> usize {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&hash[8..16]);
    (u64::from_le_bytes(bytes) % slots as u64) as usize
}

/// The slot of `hash`, live or expired.
pub fn find(state: &PartitionState, entries: &[RateEntry], hash: &[u8; 16]) -> Option<usize> {
    let slots = entries.len();
    let start = home(hash, slots);
    (0..=(state.max_probe as usize).min(slots - 1))
        .map(|step| (start + step) % slots)
        .find(|&i| entries[i].in_use && entries[i].hash == *hash)
}

#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Every slot of the partition holds a live key.
    Full,
    /// The database holds its share of the partition in live keys.
    Share,
}

fn tracked(state: &mut PartitionState, database: u32) -> Option<&mut DatabaseCount> {
    state.databases.iter_mut().find(|d| d.database == database && d.entries > 0)
}

fn count_of(entries: &[RateEntry], database: u32) -> u32 {
    entries.iter().filter(|e| e.in_use && e.database == database).count() as u32
}

/// Counts one more entry of `database` (tracked when a counter is free:
/// its count, until then unknown, is read from the entries first).
fn count_in(state: &mut PartitionState, entries: &[RateEntry], database: u32) {
    state.in_use += 1;
    if let Some(d) = tracked(state, database) {
        d.entries += 1;
        return;
    }
    if let Some(free) = state.databases.iter().position(|d| d.entries == 0) {
        // Called before the new entry is marked in use.
        state.databases[free] = DatabaseCount { database, entries: count_of(entries, database) + 1 };
    }
}

fn count_out(state: &mut PartitionState, database: u32) {
    state.in_use -= 1;
    if let Some(d) = tracked(state, database) {
        d.entries -= 1;
    }
}

/// Frees the entry at `i` (in use).
pub fn free(state: &mut PartitionState, entries: &mut [RateEntry], i: usize) {
    count_out(state, entries[i].database);
    entries[i] = RateEntry::default();
}

/// Frees every expired entry and recomputes `max_probe` from the live ones;
/// returns how many live entries `database` holds.
pub fn reclaim(state: &mut PartitionState, entries: &mut [RateEntry], now_us: i64, database: u32) -> u32 {
    let slots = entries.len();
    let mut max_probe = 0;
    let mut mine = 0;
    for i in 0..slots {
        if !entries[i].in_use {
            continue;
        }
        if entries[i].expires_at_us <= now_us {
            free(state, entries, i);
            continue;
        }
        max_probe = max_probe.max((i + slots - home(&entries[i].hash, slots)) % slots);
        mine += u32::from(entries[i].database == database);
    }
    state.max_probe = max_probe as u32;
    state.reclaimed_at_us = now_us;
    mine
}

/// Probes longer than this make a lookup of a new key read the partition
/// once a second to shorten them (after a flood of keys that expired,
/// every new key would otherwise read `max_probe` slots).
const LONG_PROBE: u32 = 64;

/// Frees expired entries when the partition's probes got long and it was
/// not done in the last second.
pub fn shorten_probes(state: &mut PartitionState, entries: &mut [RateEntry], now_us: i64) {
    if state.max_probe > LONG_PROBE && now_us - state.reclaimed_at_us > 1_000_000 {
        reclaim(state, entries, now_us, 0);
    }
}

/// The slot a new entry of `database` for `hash` goes to, already counted
/// and marked in use with its hash and database (the rest is the caller's).
/// `hash` must not be in the partition.
pub fn place(
    state: &mut PartitionState,
    entries: &mut [RateEntry],
    hash: &[u8; 16],
    database: u32,
    now_us: i64,
    limit: u32,
) -> Result<usize, Refusal> {
    let known = tracked(state, database).map(|d| d.entries);
    let maybe_over = match known {
        Some(n) => n >= limit,
        None => state.in_use >= limit,
    };
    if maybe_over && reclaim(state, entries, now_us, database) >= limit {
        return Err(Refusal::Share);
    }
    let slots = entries.len();
    let start = home(hash, slots);
    let (step, i) = (0..slots)
        .map(|step| (step, (start + step) % slots))
        .find(|&(_, i)| !entries[i].in_use || entries[i].expires_at_us <= now_us)
        .ok_or(Refusal::Full)?;
    if entries[i].in_use {
        free(state, entries, i);
    }
    count_in(state, entries, database);
    state.max_probe = state.max_probe.max(step as u32);
    entries[i] = RateEntry { hash: *hash, in_use: true, database, ..RateEntry::default() };
    Ok(i)
}
