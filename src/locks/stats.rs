//! Per-key telemetry of lock calls, kept in shared memory when pg_distlock
//! is preloaded (`distlock.lock_stats`). Entries live in LWLock partitions
//! with open addressing; a new key that finds no free slot replaces the
//! least recently used key that nobody holds, so hot keys stay visible.

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::errors::{raise, raise_with_hint, OrRaise};
use crate::shared::{self, LockStatEntry, STATS_PARTITIONS};

/// How many slots a lookup inspects.
const MAX_PROBE: usize = 32;

/// What a lock call did, as telemetry counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// Granted; `waited_us` is Some when the call had to wait.
    Acquired {
        waited_us: Option<i64>,
        begins_hold: bool,
    },
    FailedTry,
    TimedOut {
        waited_us: i64,
    },
    /// The backend's last hold of the key ended.
    HoldEnded,
}

fn database() -> u32 {
    unsafe { pg_sys::MyDatabaseId }.to_u32()
}

fn now_us() -> i64 {
    unsafe { pg_sys::GetCurrentTimestamp() }
}

/// splitmix64 of (database, key): spreads neighbouring keys over partitions.
fn hash(database: u32, key: i64) -> u64 {
    let mut x = (key as u64) ^ ((database as u64) << 32 | database as u64).rotate_left(17);
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The slot of (database, key), or a slot it may take: a never-used one, or
/// else the least recently used idle one among those probed.
fn probe(
    entries: &[LockStatEntry],
    start: usize,
    database: u32,
    key: i64,
) -> Option<(usize, bool)> {
    let len = entries.len();
    let mut victim: Option<usize> = None;
    for step in 0..MAX_PROBE.min(len) {
        let i = (start + step) % len;
        let entry = &entries[i];
        if !entry.in_use {
            return Some((i, false));
        }
        if entry.database == database && entry.key == key {
            return Some((i, true));
        }
        let idle = entry.holders <= 0;
        if idle && victim.is_none_or(|v| entries[v].last_used_us > entry.last_used_us) {
            victim = Some(i);
        }
    }
    victim.map(|i| (i, false))
}

/// Records `event` for `key` of this database; does nothing without telemetry.
pub fn record(key: i64, event: Event) {
    if shared::stats_partitions() == 0 {
        return;
    }
    let database = database();
    let h = hash(database, key);
    let now = now_us();
    shared::with_stats_partition((h % STATS_PARTITIONS as u64) as usize, |entries| {
        let start = ((h / STATS_PARTITIONS as u64) % entries.len() as u64) as usize;
        let Some((i, found)) = probe(entries, start, database, key) else {
            return; // every probed key is held right now: not tracked
        };
        if !found {
            if event == Event::HoldEnded {
                return;
            }
            entries[i] = LockStatEntry {
                in_use: true,
                database,
                key,
                ..LockStatEntry::default()
            };
        }
        let entry = &mut entries[i];
        entry.last_used_us = now;
        match event {
            Event::Acquired {
                waited_us,
                begins_hold,
            } => {
                entry.acquisitions += 1;
                if let Some(waited) = waited_us {
                    entry.waits += 1;
                    entry.total_wait_us += waited;
                    entry.max_wait_us = entry.max_wait_us.max(waited);
                }
                if begins_hold {
                    if entry.holders <= 0 {
                        entry.holders = 0;
                        entry.held_since_us = now;
                    }
                    entry.holders += 1;
                }
            }
            Event::FailedTry => entry.failed_tries += 1,
            Event::TimedOut { waited_us } => {
                entry.timeouts += 1;
                entry.total_wait_us += waited_us;
                entry.max_wait_us = entry.max_wait_us.max(waited_us);
            }
            Event::HoldEnded => entry.holders = (entry.holders - 1).max(0),
        }
    });
}

fn require_telemetry() {
    if !shared::available() {
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "pg_distlock lock telemetry needs shared memory, which this server does not give it",
            crate::pg_compat::SHARED_MEMORY_HINT,
        );
    }
}

fn micros_to_interval(us: i64) -> Interval {
    Interval::new(0, 0, us).unwrap_or_else(|e| {
        raise(PgSqlErrorCode::ERRCODE_INTERVAL_FIELD_OVERFLOW, format!("lock wait of {us} µs: {e}"))
    })
}

/// The keys a caller with a scoped monitor capability may see telemetry of:
/// those of lock names in its scope (None: every key). A key without a
/// recorded name, or with names only outside the scope, is not shown, so a
/// scoped monitor cannot tell whether another tenant used a guessed name.
fn keys_in_monitor_scope() -> Option<std::collections::HashSet<i64>> {
    let scope = crate::scopes::of_caller(crate::scopes::Capability::Monitor);
    let prefixes = scope.as_parameter()?;
    Some(crate::access::connect(|client| {
        let stmt = crate::plans::plan(
            client,
            include_str!("../../sql/queries/lock_keys_in_scope.sql"),
            &[crate::plans::types::TEXT_ARRAY],
        );
        client
            .select(&*stmt, None, &[prefixes.into()])
            .and_then(|rows| rows.map(|row| row.get::<i64>(1).map(Option::unwrap_or_default)).collect())
            .or_raise()
    }))
}

/// The raw telemetry rows of this database (of the keys in the caller's
/// monitor scope); `distlock.lock_stats` adds names
/// and checks current holds against pg_locks.
#[pg_extern(volatile, parallel_restricted)]
#[allow(clippy::type_complexity)]
pub(crate) fn lock_stats_entries() -> TableIterator<
    'static,
    (
        name!(key, i64),
        name!(acquisitions, i64),
        name!(failed_tries, i64),
        name!(timeouts, i64),
        name!(waits, i64),
        name!(total_wait, Interval),
        name!(max_wait, Interval),
        name!(holders, i32),
        name!(held_for, Option<Interval>),
        name!(last_used, TimestampWithTimeZone),
    ),
> {
    require_telemetry();
    let database = database();
    let now = now_us();
    let visible = keys_in_monitor_scope();
    let mut rows = Vec::new();
    for partition in 0..shared::stats_partitions() {
        shared::with_stats_partition(partition, |entries| {
            for e in entries
                .iter()
                .filter(|e| e.in_use && e.database == database)
                .filter(|e| visible.as_ref().is_none_or(|keys| keys.contains(&e.key)))
            {
                rows.push(*e);
            }
        });
    }
    rows.sort_by_key(|e| e.key);
    TableIterator::new(rows.into_iter().map(move |e| {
        (
            e.key,
            e.acquisitions,
            e.failed_tries,
            e.timeouts,
            e.waits,
            micros_to_interval(e.total_wait_us),
            micros_to_interval(e.max_wait_us),
            e.holders,
            (e.holders > 0).then(|| micros_to_interval(now - e.held_since_us)),
            TimestampWithTimeZone::try_from(e.last_used_us)
                .unwrap_or_else(|_| TimestampWithTimeZone::positive_infinity()),
        )
    }))
}

/// Zeroes the counters of this database's keys (keys held right now keep
/// their holders and hold start). Returns how many keys were reset.
#[pg_extern(volatile, parallel_unsafe)]
fn reset_lock_stats() -> i64 {
    require_telemetry();
    let database = database();
    let mut reset = 0i64;
    for partition in 0..shared::stats_partitions() {
        shared::with_stats_partition(partition, |entries| {
            // Rebuilt rather than emptied in place: clearing a slot in the
            // middle of a probe run would hide the keys placed after it.
            let kept: Vec<LockStatEntry> = entries
                .iter()
                .filter(|e| e.in_use && (e.database != database || e.holders > 0))
                .map(|e| {
                    if e.database != database {
                        return *e;
                    }
                    LockStatEntry {
                        in_use: true,
                        database,
                        key: e.key,
                        holders: e.holders,
                        held_since_us: e.held_since_us,
                        last_used_us: e.last_used_us,
                        ..LockStatEntry::default()
                    }
                })
                .collect();
            reset += entries
                .iter()
                .filter(|e| e.in_use && e.database == database)
                .count() as i64;
            entries.fill(LockStatEntry::default());
            for e in kept {
                let start = ((hash(e.database, e.key) / STATS_PARTITIONS as u64)
                    % entries.len() as u64) as usize;
                if let Some((i, _)) = probe(entries, start, e.database, e.key) {
                    entries[i] = e;
                }
            }
        });
    }
    reset
}
