//! The backend's own CPU time, for costs that must not count waits: a
//! statement that waited for a lock, or a backend stopped or starved of
//! CPU, took long on the clock without costing anything.

#[cfg(any(test, feature = "pg_test"))]
use pgrx::pg_schema;

/// The CPU time this backend (one process) has used so far, in
/// microseconds; the wall clock where the platform's process clock is not
/// known here.
pub fn micros() -> i64 {
    process_clock().unwrap_or_else(|| unsafe { pgrx::pg_sys::GetCurrentTimestamp() })
}

#[cfg(all(any(target_os = "linux", target_os = "macos"), target_pointer_width = "64"))]
fn process_clock() -> Option<i64> {
    #[repr(C)]
    struct Timespec {
        seconds: i64,
        nanoseconds: i64,
    }
    extern "C" {
        fn clock_gettime(clock: i32, time: *mut Timespec) -> i32;
    }
    #[cfg(target_os = "linux")]
    const CLOCK_PROCESS_CPUTIME_ID: i32 = 2;
    #[cfg(target_os = "macos")]
    const CLOCK_PROCESS_CPUTIME_ID: i32 = 12;
    let mut time = Timespec { seconds: 0, nanoseconds: 0 };
    let status = unsafe { clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &mut time) };
    (status == 0).then(|| time.seconds.saturating_mul(1_000_000).saturating_add(time.nanoseconds / 1000))
}

#[cfg(not(all(any(target_os = "linux", target_os = "macos"), target_pointer_width = "64")))]
fn process_clock() -> Option<i64> {
    None
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    /// Sleeping costs no CPU time; working does.
    #[pg_test]
    fn cpu_time_counts_work_not_waits() {
        let before = super::micros();
        crate::test_sql::run("SELECT pg_sleep(0.2)");
        let slept = super::micros() - before;
        assert!(slept < 100_000, "a 0.2 s sleep cost {slept} us of CPU");
        let before = super::micros();
        crate::test_sql::run("SELECT count(*) FROM generate_series(1, 3000000)");
        assert!(super::micros() > before, "work costs CPU time");
    }
}
