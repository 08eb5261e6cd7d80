//! Configuration settings (GUCs), all under the `distlock.` prefix.

use std::ffi::CString;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

use pgrx::guc::{GucContext, GucFlags, GucRegistry, GucSetting};
use pgrx::PgSqlErrorCode;

use crate::errors::raise;

pub static SNOWFLAKE_EPOCH: GucSetting<Option<CString>> =
    GucSetting::<Option<CString>>::new(Some(c"1609459200000")); // 2021-01-01 00:00:00 UTC
pub static SNOWFLAKE_MAX_CLOCK_BACKWARD_MS: GucSetting<i32> = GucSetting::<i32>::new(1000);
pub static RATE_LIMIT_CAPACITY: GucSetting<i32> = GucSetting::<i32>::new(65_536);
pub static RATE_LIMIT_DATABASE_SHARE: GucSetting<i32> = GucSetting::<i32>::new(50);
pub static LOCK_STATS_CAPACITY: GucSetting<i32> = GucSetting::<i32>::new(4096);
pub static QUEUE_COUNTERS_CAPACITY: GucSetting<i32> = GucSetting::<i32>::new(1024);
pub static QUEUE_COUNTERS_DATABASE_SHARE: GucSetting<i32> = GucSetting::<i32>::new(50);
/// Who this connection's pg_distlock locks belong to (one thread of control
/// of a client, whatever connections it uses): the owner-level deadlock check.
pub static OWNER: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(None);
pub static MAX_LOCKS_PER_SESSION: GucSetting<i32> = GucSetting::<i32>::new(1000);
pub static MAX_HOLD_TTL_SECONDS: GucSetting<i32> = GucSetting::<i32>::new(86_400);
pub static MAX_JOB_LEASE_SECONDS: GucSetting<i32> = GucSetting::<i32>::new(86_400);
/// The time zone of scheduled tasks that name none (schedule_timezone NULL).
pub static TIMEZONE: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(c"UTC"));
#[cfg(not(feature = "pg15"))]
pub static DYNAMIC_SHARED_MEMORY: GucSetting<bool> = GucSetting::<bool>::new(true);

pub fn register() {
    // SAFETY: the assign hook is guarded (pg_guard) and only stores atomics.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"distlock.owner",
            c"Who this connection's pg_distlock locks belong to: one thread of control of a client (the Python client sets its worker id, thread and task).",
            c"A wait that closes a cycle through the connections of several owners (one holding a lock on one connection and waiting on another) raises 40P01 in one waiter, after deadlock_timeout. Empty: the connection is its own owner.",
            &OWNER,
            GucContext::Userset,
            GucFlags::default(),
            None,
            Some(owner_assigned),
            None,
        );
    }
    // SAFETY: the check hook is guarded (pg_guard) and only reads the zone data.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"distlock.timezone",
            c"Time zone in which the schedule of a task without a schedule_timezone of its own is evaluated.",
            c"A name PostgreSQL's TimeZone setting accepts (such as Europe/Berlin). Server-wide so that every worker computes the same next slot; a change applies to each such task from its next run on.",
            &TIMEZONE,
            GucContext::Sighup,
            GucFlags::default(),
            Some(timezone_check),
            None,
            None,
        );
    }
    GucRegistry::define_string_guc(
        c"distlock.snowflake_epoch",
        c"Epoch of snowflake IDs, in milliseconds since 1970-01-01 UTC.",
        c"Changing it changes every ID's timestamp: set it once, before the first ID.",
        &SNOWFLAKE_EPOCH,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"distlock.snowflake_max_clock_backward",
        c"How long generate_snowflake_id waits for a clock that moved backwards before failing.",
        c"",
        &SNOWFLAKE_MAX_CLOCK_BACKWARD_MS,
        0,
        60_000,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
    GucRegistry::define_int_guc(
        c"distlock.max_locks_per_session",
        c"Most locks one session may hold through distlock.lock calls and session-mode task claims together.",
        c"0 means no limit. Keeps one session from filling the server's shared lock table.",
        &MAX_LOCKS_PER_SESSION,
        0,
        i32::MAX,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"distlock.max_hold_ttl",
        c"Longest TTL a lease, a semaphore slot or a leadership may be taken or renewed for.",
        c"A longer p_ttl is refused with 22023: a holder that dies holds its name until the TTL runs out.",
        &MAX_HOLD_TTL_SECONDS,
        1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"distlock.max_job_lease",
        c"Longest lease a queued job may be claimed or extended for.",
        c"A longer p_lease is refused with 22023: a consumer that dies holds its job until the lease runs out.",
        &MAX_JOB_LEASE_SECONDS,
        1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
    // A postmaster-level setting can only be defined while preloading. On
    // 17+ the DSM registry sizes its segment from them at the first use
    // after a start: reloadable then, but read once.
    if unsafe { pgrx::pg_sys::process_shared_preload_libraries_in_progress } {
        register_capacities(|| GucContext::Postmaster);
    } else {
        #[cfg(not(feature = "pg15"))]
        register_capacities(|| GucContext::Sighup);
    }
    #[cfg(not(feature = "pg15"))]
    GucRegistry::define_bool_guc(
        c"distlock.dynamic_shared_memory",
        c"Without shared_preload_libraries, keep rate limits, snowflake state, lock telemetry and queue wake-ups in a DSM registry segment.",
        c"Off: tables and polling instead. No effect when pg_distlock is preloaded. Each session decides at its first use: change it only with a restart.",
        &DYNAMIC_SHARED_MEMORY,
        GucContext::Sighup,
        GucFlags::default(),
    );
    // A misspelled distlock.* setting is an error rather than a silently
    // ignored placeholder (placeholders made before the library loaded are
    // removed with a WARNING).
    unsafe { pgrx::pg_sys::MarkGUCPrefixReserved(c"distlock".as_ptr()) };
}

fn register_capacities(context: fn() -> GucContext) {
    GucRegistry::define_int_guc(
        c"distlock.rate_limit_capacity",
        c"Rate-limit keys held in shared memory.",
        c"Expired keys are reused; when every slot holds a live key, new keys are refused. Read once per server start.",
        &RATE_LIMIT_CAPACITY,
        16,
        10_000_000,
        context(),
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"distlock.rate_limit_database_share",
        c"Percent of the shared-memory rate-limit table one database may fill with live keys.",
        c"Keeps one database (and so one tenant with a database of its own) from denying keys to the others.",
        &RATE_LIMIT_DATABASE_SHARE,
        1,
        100,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"distlock.lock_stats_capacity",
        c"Lock keys whose telemetry is kept in shared memory.",
        c"0 turns telemetry off. When full, the least recently used key not held right now is replaced. Read once per server start.",
        &LOCK_STATS_CAPACITY,
        0,
        10_000_000,
        context(),
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"distlock.queue_counters_capacity",
        c"Queues whose cumulative job counters are kept in shared memory (all databases together).",
        c"0 turns the counters off; other values are raised to a multiple of 16, at least 256. A new queue takes a free slot or one idle for an hour, never a live one; a queue with none is counted in its database's overflow row. Read once per server start.",
        &QUEUE_COUNTERS_CAPACITY,
        0,
        1_000_000,
        context(),
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"distlock.queue_counters_database_share",
        c"Percent of the shared-memory queue counter table one database may fill.",
        c"Keeps one database (and so one tenant with a database of its own) from leaving the others no room for their queues.",
        &QUEUE_COUNTERS_DATABASE_SHARE,
        1,
        100,
        GucContext::Sighup,
        GucFlags::default(),
    );
}

/// (address of the setting's string, its parsed value): PostgreSQL
/// allocates a new string whenever the setting changes. Plain statics, not
/// thread-locals: a backend is one thread, and a thread-local in a shared
/// library costs a __tls_get_addr call on every ID.
static EPOCH_CACHE_ADDRESS: AtomicUsize = AtomicUsize::new(0);
static EPOCH_CACHE_MS: AtomicI64 = AtomicI64::new(0);

/// The snowflake epoch in milliseconds since the Unix epoch.
pub fn snowflake_epoch_ms() -> i64 {
    let address = unsafe { *SNOWFLAKE_EPOCH.as_ptr() } as usize;
    if address != 0 && address == EPOCH_CACHE_ADDRESS.load(Ordering::Relaxed) {
        return EPOCH_CACHE_MS.load(Ordering::Relaxed);
    }
    let parsed = parse_epoch();
    EPOCH_CACHE_MS.store(parsed, Ordering::Relaxed);
    EPOCH_CACHE_ADDRESS.store(address, Ordering::Relaxed);
    parsed
}

/// 2100-01-01 UTC: with the 41-bit range after it, every ID's timestamp
/// stays far inside PostgreSQL's timestamptz range.
const LATEST_SNOWFLAKE_EPOCH_MS: i64 = 4_102_444_800_000;

fn parse_epoch() -> i64 {
    let text = SNOWFLAKE_EPOCH.get();
    let text = text.as_deref().and_then(|c| c.to_str().ok()).unwrap_or("");
    match text.trim().parse::<i64>() {
        Ok(ms) if (0..=LATEST_SNOWFLAKE_EPOCH_MS).contains(&ms) => ms,
        _ => raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "distlock.snowflake_epoch must be milliseconds from 0 (1970-01-01) to \
                 {LATEST_SNOWFLAKE_EPOCH_MS} (2100-01-01), got \"{text}\""
            ),
        ),
    }
}

/// distlock.owner's assign hook: the new owner is published at once
/// (locks/owners.rs), not at the connection's next lock call.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn owner_assigned(newval: *const std::ffi::c_char, _extra: *mut std::ffi::c_void) {
    let owner = if newval.is_null() { &[][..] } else { unsafe { std::ffi::CStr::from_ptr(newval) }.to_bytes() };
    crate::locks::owner_assigned(owner);
}

/// distlock.timezone's check hook: a zone the server's time zone data has
/// (PostgreSQL's message names the setting and the value otherwise).
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn timezone_check(
    newval: *mut *mut std::ffi::c_char,
    _extra: *mut *mut std::ffi::c_void,
    _source: pgrx::pg_sys::GucSource::Type,
) -> bool {
    if newval.is_null() || unsafe { *newval }.is_null() {
        return false;
    }
    crate::schedule::is_known_zone(unsafe { std::ffi::CStr::from_ptr(*newval) })
}

#[cfg(any(test, feature = "pg_test"))]
#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test(error = "invalid configuration parameter name \"distlock.snowflake_epok\"")]
    fn gucs_a_misspelled_distlock_setting_is_an_error() {
        Spi::run("SET distlock.snowflake_epok = '0'").expect("refused");
    }
}
