//! Who may do what: callers need only EXECUTE on pg_distlock's functions.
//!
//! pg_distlock's statements run with the rights of the extension's owner
//! (the owner of schema `distlock`), the way PostgreSQL's own maintenance
//! commands switch user: callers hold no privileges on the tables, so they
//! cannot write them directly. The switch is made in the code around
//! pg_distlock's own statements rather than by marking the functions
//! SECURITY DEFINER, for two reasons. The caller's role is still known
//! (`GetUserId()` before the switch), which SECURITY DEFINER would hide; and
//! no per-call `SET search_path` is needed, which costs a GUC save and restore
//! on every call (see docs/performance.md). Every name in `sql/queries` is
//! schema-qualified, types and operators included, so the caller's
//! search_path, `pg_temp` and look-alike objects are never consulted.
//!
//! Holds (leases, semaphore slots, leaderships, queue jobs, task claims)
//! record the role that took them. Acting on a hold of another role needs
//! that role's privileges (membership) or the admin capability.

use std::cell::Cell;
use std::ffi::CStr;

use pgrx::prelude::*;
use pgrx::spi::{SpiClient, SpiResult};
use pgrx::PgSqlErrorCode;

use crate::errors::{raise, OrRaise};
use crate::plans::plan;

thread_local! {
    /// The role that called into pg_distlock, while its statements run as the owner.
    static CALLER: Cell<Option<pg_sys::Oid>> = const { Cell::new(None) };
}

thread_local! {
    /// The owner of schema `distlock`, looked up once per backend and
    /// forgotten whenever any schema changes (owner, drop, re-create).
    static OWNER: Cell<Option<pg_sys::Oid>> = const { Cell::new(None) };
    static OWNER_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

#[pg_guard]
unsafe extern "C-unwind" fn forget_owner(_arg: pg_sys::Datum, _cache: i32, _hash: u32) {
    OWNER.set(None);
}

/// The owner of schema `distlock`, who owns every table of the extension.
fn owner() -> pg_sys::Oid {
    if let Some(owner) = OWNER.get() {
        return owner;
    }
    if !OWNER_CALLBACK.get() {
        unsafe {
            pg_sys::CacheRegisterSyscacheCallback(
                pg_sys::SysCacheIdentifier::NAMESPACEOID as i32,
                Some(forget_owner),
                pg_sys::Datum::from(0),
            )
        };
        OWNER_CALLBACK.set(true);
    }
    let owner = look_up_owner();
    OWNER.set(Some(owner));
    owner
}

fn look_up_owner() -> pg_sys::Oid {
    unsafe {
        let schema = pg_sys::get_namespace_oid(c"distlock".as_ptr(), false);
        let tuple = pg_sys::SearchSysCache1(
            pg_sys::SysCacheIdentifier::NAMESPACEOID as i32,
            pg_sys::Datum::from(schema),
        );
        if tuple.is_null() {
            raise(PgSqlErrorCode::ERRCODE_INVALID_SCHEMA_NAME, "schema \"distlock\" does not exist");
        }
        let owner = (*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_namespace>(tuple)).nspowner;
        pg_sys::ReleaseSysCache(tuple);
        owner
    }
}

/// While alive, statements run as the extension's owner; dropping it (also
/// when an ERROR unwinds) restores the caller.
pub struct OwnerRights {
    saved_user: pg_sys::Oid,
    saved_context: i32,
    outermost: bool,
}

pub fn as_owner() -> OwnerRights {
    let (mut user, mut context) = (pg_sys::InvalidOid, 0);
    unsafe { pg_sys::GetUserIdAndSecContext(&mut user, &mut context) };
    let owner = owner();
    // Nested only when the outer switch is visibly still in force; an abort
    // resets the user id, so a stale CALLER is never taken for a caller.
    let outermost = CALLER.get().is_none() || user != owner;
    if outermost {
        CALLER.set(Some(user));
    }
    unsafe {
        pg_sys::SetUserIdAndSecContext(owner, context | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32);
    }
    OwnerRights { saved_user: user, saved_context: context, outermost }
}

impl Drop for OwnerRights {
    fn drop(&mut self) {
        unsafe { pg_sys::SetUserIdAndSecContext(self.saved_user, self.saved_context) };
        if self.outermost {
            CALLER.set(None);
        }
    }
}

/// `Spi::connect` with the owner's rights.
pub fn connect<R, F: FnOnce(&SpiClient<'_>) -> R>(f: F) -> R {
    let _rights = as_owner();
    let _plans = crate::plans::generic_plans();
    Spi::connect(f)
}

/// `Spi::connect_mut` with the owner's rights.
pub fn connect_mut<R, F: FnOnce(&mut SpiClient<'_>) -> R>(f: F) -> R {
    let _rights = as_owner();
    let _plans = crate::plans::generic_plans();
    Spi::connect_mut(f)
}

/// The role that called pg_distlock (not the owner it runs statements as).
pub fn caller() -> pg_sys::Oid {
    CALLER.get().unwrap_or_else(|| unsafe { pg_sys::GetUserId() })
}

/// A role's name, or its OID when it no longer exists.
pub fn role_name(role: pg_sys::Oid) -> String {
    let name = unsafe { pg_sys::GetUserNameFromId(role, true) };
    if name.is_null() {
        format!("role with OID {}", role.to_u32())
    } else {
        unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
    }
}

fn has_privileges_of(member: pg_sys::Oid, role: pg_sys::Oid) -> bool {
    unsafe { pg_sys::has_privs_of_role(member, role) }
}

/// Superusers, members of the owner, and roles granted the admin capability.
pub fn is_admin(client: &SpiClient<'_>, role: pg_sys::Oid) -> bool {
    if has_privileges_of(role, owner()) {
        return true;
    }
    let stmt = plan(client, include_str!("../sql/queries/admin_roles.sql"), &[]);
    let admins: SpiResult<Vec<pg_sys::Oid>> = client
        .select(&*stmt, None, &[])
        .and_then(|rows| rows.map(|row| row.get::<pg_sys::Oid>(1).map(Option::unwrap_or_default)).collect());
    admins.or_raise().into_iter().any(|admin| has_privileges_of(role, admin))
}

/// Refuses (42501) to act on `what`, held by `holder`, for a caller that is
/// neither that role (or a member of it) nor an admin. A hold with no
/// recorded role was taken before roles were recorded: its owner string
/// alone decides, as it did then.
pub fn require_holder(client: &SpiClient<'_>, holder: Option<pg_sys::Oid>, what: impl FnOnce() -> String) {
    let Some(holder) = holder else { return };
    let caller = caller();
    if caller == holder || has_privileges_of(caller, holder) || is_admin(client, caller) {
        return;
    }
    raise(
        PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
        format!("role \"{}\" may not act on {} held by role \"{}\"", role_name(caller), what(), role_name(holder)),
    );
}
