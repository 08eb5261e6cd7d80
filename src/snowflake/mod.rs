//! Snowflake IDs: 41 bits of milliseconds since `distlock.snowflake_epoch`,
//! 10 bits of worker id, 12 bits of sequence. For one worker id, IDs are
//! unique and strictly increasing across all backends: preloaded, through
//! one atomic per worker id in shared memory; otherwise through the worker
//! id's row in distlock.id_generator, locked once per transaction.

mod clock;
mod marks;
mod memory;
mod table;
#[cfg(any(test, feature = "pg_test"))]
mod snowflake_tests;

use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::errors::{raise, required};
use crate::gucs::snowflake_epoch_ms;

pub const MAX_WORKER_ID: i32 = 1023;
pub const MAX_SEQUENCE: u64 = 4095;
const TIMESTAMP_BITS: u32 = 41;

/// A (millisecond, sequence) pair packed as ms << 12 | sequence.
pub fn pack(ms: i64, sequence: u64) -> u64 {
    ((ms as u64) << 12) | sequence
}

pub fn unpack(state: u64) -> (i64, u64) {
    ((state >> 12) as i64, state & MAX_SEQUENCE)
}

/// The state after `current` at clock `now_ms`, or the clock time to wait
/// for (the clock is behind `current`, or its millisecond is used up).
pub fn step(current: u64, now_ms: i64) -> Result<u64, i64> {
    let (ms, sequence) = unpack(current);
    if now_ms > ms {
        Ok(pack(now_ms, 0))
    } else if now_ms == ms && sequence < MAX_SEQUENCE {
        Ok(pack(ms, sequence + 1))
    } else if sequence < MAX_SEQUENCE {
        Err(ms)
    } else {
        Err(ms + 1)
    }
}

/// The latest millisecond the layout can encode with the current epoch.
fn last_encodable_ms() -> i64 {
    snowflake_epoch_ms() + (1i64 << TIMESTAMP_BITS) - 1
}

/// A worker id's persisted mark, checked before anything adds to it: a mark
/// written by hand past the 41-bit range would overflow (22003).
pub fn checked_mark(worker_id: i32, mark: i64) -> i64 {
    let last = last_encodable_ms();
    if !(0..=last).contains(&mark) {
        raise(
            PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!(
                "distlock.id_generator.last_ms of worker id {worker_id} is {mark}, outside 0..{last} \
                 (the 41-bit range of distlock.snowflake_epoch)"
            ),
        );
    }
    mark
}

fn compose(ms: i64, worker_id: i32, sequence: u64) -> i64 {
    let epoch = snowflake_epoch_ms();
    let since_epoch = ms - epoch;
    if !(0..(1i64 << TIMESTAMP_BITS)).contains(&since_epoch) {
        raise(
            PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
            format!("the clock ({ms} ms) is outside the 41-bit range of distlock.snowflake_epoch ({epoch} ms)"),
        );
    }
    (since_epoch << 22) | ((worker_id as i64) << 12) | sequence as i64
}

/// A new unique 64-bit ID for `p_worker_id` (0..1023).
///
/// Not pinned to a search_path: pinning costs about a microsecond per call,
/// as much as the rest of the function, and the few statements it runs
/// (sql/queries/sf_*.sql) qualify every table, function and operator.
#[pg_extern]
fn generate_snowflake_id(p_worker_id: Option<i32>) -> i64 {
    let worker_id = crate::errors::int_in_range(p_worker_id, "p_worker_id", 0..=MAX_WORKER_ID);
    crate::errors::require_primary("generate snowflake IDs");
    let (ms, sequence) = match memory::next(worker_id) {
        Some(state) => unpack(state),
        None => unpack(table::next(worker_id)),
    };
    compose(ms, worker_id, sequence)
}

fn id_argument(p_id: Option<i64>) -> i64 {
    let id = required(p_id, "p_id");
    if id < 0 {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("p_id is not a snowflake ID (negative): {id}"),
        );
    }
    id
}

/// When the ID was generated.
#[pg_extern(stable, parallel_safe)]
fn snowflake_timestamp(p_id: Option<i64>) -> TimestampWithTimeZone {
    // The epoch is bounded (see gucs.rs), so this cannot overflow; checked
    // all the same, since an overflow here would be a wrong answer, not an error.
    const UNIX_TO_POSTGRES_EPOCH_US: i64 = 946_684_800_000_000;
    let id = id_argument(p_id);
    snowflake_epoch_ms()
        .checked_add(id >> 22)
        .and_then(|ms| ms.checked_mul(1000))
        .and_then(|us| us.checked_sub(UNIX_TO_POSTGRES_EPOCH_US))
        .and_then(|us| TimestampWithTimeZone::try_from(us).ok())
        .unwrap_or_else(|| {
            raise(PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW, format!("the timestamp of snowflake ID {id} is out of range"))
        })
}

/// The worker id the ID was generated for.
#[pg_extern(immutable, parallel_safe)]
fn snowflake_worker_id(p_id: Option<i64>) -> i32 {
    ((id_argument(p_id) >> 12) & 1023) as i32
}

/// The ID's sequence number within its millisecond.
#[pg_extern(immutable, parallel_safe)]
fn snowflake_sequence(p_id: Option<i64>) -> i32 {
    (id_argument(p_id) & 4095) as i32
}
