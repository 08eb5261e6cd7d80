//! pg_distlock's shared state without shared_preload_libraries, PostgreSQL
//! 17 and later: two segments of the server's DSM registry. The first
//! backend that needs them creates them, with the sizes its settings give;
//! every later backend attaches, whatever its own settings say (a setting
//! changed after that waits for a restart, as when preloaded).
//!
//! The names carry the layout's version: a library whose structs differ
//! must not attach to another library's segment, which a backend still
//! running the previous library after an upgrade keeps using.

use std::ffi::CStr;

use pgrx::pg_sys;
use pgrx::prelude::*;

use super::{Layout, PARTITION_LOCKS, TRANCHE};

/// Bump when any `#[repr(C)]` struct of `shared/mod.rs` changes.
const SIZES_SEGMENT: &CStr = c"pg_distlock sizes v1";
const STATE_SEGMENT: &CStr = c"pg_distlock state v1";

/// Fixed-size first segment: how big the second one is, decided once.
#[repr(C)]
struct Sizes {
    slots_per_partition: usize,
    stats_per_partition: usize,
    tranche_id: i32,
}

/// The sizes the state segment's initialisation lays out (its callback
/// receives only the address).
static mut CREATING: Option<(usize, usize, i32)> = None;

#[pg_guard]
unsafe extern "C-unwind" fn init_sizes(ptr: *mut std::ffi::c_void) {
    unsafe {
        ptr.cast::<Sizes>().write(Sizes {
            slots_per_partition: super::legacy_rate_slots(),
            stats_per_partition: super::stats_per_partition(),
            tranche_id: pg_sys::LWLockNewTrancheId(),
        });
    }
}

/// The partition LWLocks start on a cache line of their own.
fn locks_offset(sizes: (usize, usize)) -> usize {
    super::state_size(sizes.0, sizes.1).next_multiple_of(pg_sys::PG_CACHE_LINE_SIZE as usize)
}

fn segment_size(sizes: (usize, usize)) -> usize {
    locks_offset(sizes) + PARTITION_LOCKS * std::mem::size_of::<pg_sys::LWLockPadded>()
}

#[pg_guard]
unsafe extern "C-unwind" fn init_state(ptr: *mut std::ffi::c_void) {
    unsafe {
        let Some((slots, stats, tranche_id)) = CREATING else { return };
        let base = ptr.cast::<u8>();
        let locks = base.add(locks_offset((slots, stats))).cast::<pg_sys::LWLockPadded>();
        super::carve(base, true, slots, stats, locks);
        for lock in 0..PARTITION_LOCKS {
            pg_sys::LWLockInitialize(std::ptr::addr_of_mut!((*locks.add(lock)).lock), tranche_id);
        }
    }
}

/// Attaches this backend to the registry's segments, creating them first
/// when no backend has since the server started.
pub fn attach() -> Layout {
    unsafe {
        let mut found = false;
        let sizes = &*pg_sys::GetNamedDSMSegment(
            SIZES_SEGMENT.as_ptr(),
            std::mem::size_of::<Sizes>(),
            Some(init_sizes),
            &mut found,
        )
        .cast::<Sizes>();
        // Names the partition locks' wait events in this backend.
        pg_sys::LWLockRegisterTranche(sizes.tranche_id, TRANCHE.as_ptr());
        let dims = (sizes.slots_per_partition, sizes.stats_per_partition);
        CREATING = Some((dims.0, dims.1, sizes.tranche_id));
        let base = pg_sys::GetNamedDSMSegment(STATE_SEGMENT.as_ptr(), segment_size(dims), Some(init_state), &mut found)
            .cast::<u8>();
        CREATING = None;
        let locks = base.add(locks_offset(dims)).cast::<pg_sys::LWLockPadded>();
        super::carve(base, false, dims.0, dims.1, locks)
    }
}
