//! Scoped capabilities: a capability granted with a scope (a name prefix)
//! lets the role touch only names that start with it, as etcd's RBAC scopes
//! keys by prefix. A worker's scope covers task names and types, leases,
//! semaphores, election groups and rate-limit keys; a producer's and a
//! consumer's the queue's job names; a monitor's the rows the views show.
//!
//! A role's scope for a capability is the union of the scopes of every role
//! whose privileges it has (itself included) that holds the capability;
//! one of them unscoped makes it unscoped, and so does being an admin. A
//! role that holds the capability nowhere (EXECUTE granted by hand, or
//! pg_monitor reading the views) is unscoped, as before scopes existed.
//!
//! Scopes are asked for on hot paths, so each backend keeps the answers,
//! forgotten whenever role_capabilities changes (a statement trigger
//! invalidates the table's relcache entry in every backend) or any role or
//! membership does.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::PgSqlErrorCode;

use crate::errors::{raise_with_hint, OrRaise};
use crate::plans::{plan, types};
use crate::text::Text;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Capability {
    Worker,
    Producer,
    Consumer,
    Monitor,
}

impl Capability {
    fn name(self) -> &'static str {
        match self {
            Capability::Worker => "worker",
            Capability::Producer => "producer",
            Capability::Consumer => "consumer",
            Capability::Monitor => "monitor",
        }
    }
}

/// The names a role may touch under one capability.
#[derive(Debug)]
pub enum Scope {
    Everything,
    /// Names starting with one of these (never empty).
    Prefixes(Vec<Text>),
}

impl Scope {
    pub fn admits(&self, name: &[u8]) -> bool {
        match self {
            Scope::Everything => true,
            Scope::Prefixes(prefixes) => prefixes.iter().any(|p| name.starts_with(p.bytes())),
        }
    }

    /// The prefixes as a statement parameter: NULL for everything.
    pub fn as_parameter(&self) -> Option<Vec<Text>> {
        match self {
            Scope::Everything => None,
            Scope::Prefixes(prefixes) => Some(prefixes.clone()),
        }
    }

    fn shown(&self) -> String {
        match self {
            Scope::Everything => "everything".into(),
            Scope::Prefixes(prefixes) => {
                prefixes.iter().map(|p| format!("\"{}\"", p.shown())).collect::<Vec<_>>().join(", ")
            }
        }
    }
}

thread_local! {
    static SCOPES: RefCell<HashMap<(pg_sys::Oid, Capability), Rc<Scope>>> = RefCell::new(HashMap::new());
    /// role_capabilities' OID when the cache was filled, to tell its
    /// invalidations from other tables'.
    static TABLE: Cell<pg_sys::Oid> = const { Cell::new(pg_sys::InvalidOid) };
    static CALLBACKS: Cell<bool> = const { Cell::new(false) };
    /// Whether any grant has a scope; while none has, the hot paths read
    /// nothing else.
    static ANY_SCOPED: Cell<Option<bool>> = const { Cell::new(None) };
    static EVERYTHING: Rc<Scope> = Rc::new(Scope::Everything);
}

fn forget() {
    SCOPES.with_borrow_mut(HashMap::clear);
    ANY_SCOPED.set(None);
}

#[pg_guard]
unsafe extern "C-unwind" fn forget_on_relation(_arg: pg_sys::Datum, relation: pg_sys::Oid) {
    if relation == pg_sys::InvalidOid || relation == TABLE.get() {
        forget();
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn forget_on_role(_arg: pg_sys::Datum, _cache: i32, _hash: u32) {
    forget();
}

fn register_callbacks() {
    if CALLBACKS.get() {
        return;
    }
    unsafe {
        pg_sys::CacheRegisterRelcacheCallback(Some(forget_on_relation), pg_sys::Datum::from(0));
        for cache in [pg_sys::SysCacheIdentifier::AUTHOID, pg_sys::SysCacheIdentifier::AUTHMEMMEMROLE] {
            pg_sys::CacheRegisterSyscacheCallback(cache as i32, Some(forget_on_role), pg_sys::Datum::from(0));
        }
    }
    CALLBACKS.set(true);
}

/// The calling role's scope for `capability` (see access::caller). Runs a
/// statement only when this backend does not know the answer.
pub fn of_caller(capability: Capability) -> Rc<Scope> {
    if !any_scoped() {
        return EVERYTHING.with(Rc::clone);
    }
    let role = crate::access::caller();
    cached(role, capability).unwrap_or_else(|| crate::access::connect(|client| fill(client, role, capability)))
}

fn any_scoped() -> bool {
    if let Some(any) = ANY_SCOPED.get() {
        return any;
    }
    register_callbacks();
    TABLE.set(crate::version::table_oid(c"role_capabilities"));
    // SQL objects of a release before scopes: nobody is scoped.
    let any = crate::version::has_column(c"role_capabilities", c"scope")
        && crate::access::connect(|client| {
            let stmt = plan(client, include_str!("../sql/queries/any_scopes.sql"), &[]);
            client.select(&*stmt, None, &[]).and_then(crate::plans::first_value::<bool>).or_raise()
        })
        .unwrap_or(false);
    ANY_SCOPED.set(Some(any));
    any
}

fn cached(role: pg_sys::Oid, capability: Capability) -> Option<Rc<Scope>> {
    SCOPES.with_borrow(|cache| cache.get(&(role, capability)).cloned())
}

/// Only after any_scoped(), which registered the callbacks that empty the cache.
fn fill(client: &SpiClient<'_>, role: pg_sys::Oid, capability: Capability) -> Rc<Scope> {
    let scope = Rc::new(look_up(client, role, capability));
    SCOPES.with_borrow_mut(|cache| cache.insert((role, capability), scope.clone()));
    scope
}

fn look_up(client: &SpiClient<'_>, role: pg_sys::Oid, capability: Capability) -> Scope {
    if crate::access::is_admin(client, role) {
        return Scope::Everything;
    }
    let stmt = plan(client, include_str!("../sql/queries/role_scopes.sql"), &[types::TEXT]);
    let grants: Vec<(pg_sys::Oid, Option<Text>)> = client
        .select(&*stmt, None, &[capability.name().into()])
        .and_then(|rows| {
            rows.map(|row| Ok((row.get::<pg_sys::Oid>(1)?.unwrap_or_default(), row.get::<Text>(2)?)))
                .collect()
        })
        .or_raise();
    let mut prefixes = Vec::new();
    for (grantee, scope) in grants {
        if grantee != role && !unsafe { pg_sys::has_privs_of_role(role, grantee) } {
            continue;
        }
        match scope {
            None => return Scope::Everything,
            Some(prefix) => prefixes.push(prefix),
        }
    }
    if prefixes.is_empty() {
        return Scope::Everything;
    }
    prefixes.sort_by(|a, b| a.bytes().cmp(b.bytes()));
    prefixes.dedup();
    Scope::Prefixes(prefixes)
}

/// Refuses (42501) a `what` named `name` outside the caller's scope for
/// `capability`.
pub fn require(capability: Capability, what: &str, name: &Text) {
    let scope = of_caller(capability);
    if !scope.admits(name.bytes()) {
        refuse(capability, &scope, format!("{what} \"{}\"", name.shown()));
    }
}

/// Refuses (42501) task `task_id` unless its name or its type is in the
/// caller's worker scope. An unknown task passes, for the caller's own
/// "does not exist" to report.
pub fn require_task(client: &SpiClient<'_>, task_id: i32) {
    let scope = of_caller(Capability::Worker);
    if matches!(*scope, Scope::Everything) {
        return;
    }
    let stmt = plan(client, include_str!("../sql/queries/task_names.sql"), &[types::INT4]);
    let names = client
        .select(&*stmt, None, &[task_id.into()])
        .and_then(|rows| {
            if rows.is_empty() {
                return Ok(None);
            }
            let row = rows.first();
            Ok(Some((row.get::<Text>(1)?.unwrap_or_default(), row.get::<Text>(2)?.unwrap_or_default())))
        })
        .or_raise();
    if let Some((task_name, task_type)) = names {
        if !task_admitted(&scope, &task_name, &task_type) {
            // The id only: the task's name is outside the caller's scope.
            refuse(Capability::Worker, &scope, format!("task {task_id}"));
        }
    }
}

/// A task is in a scope when its name or its type is.
pub fn task_admitted(scope: &Scope, task_name: &Text, task_type: &Text) -> bool {
    scope.admits(task_name.bytes()) || scope.admits(task_type.bytes())
}

fn refuse(capability: Capability, scope: &Scope, what: String) -> ! {
    let role = crate::access::role_name(crate::access::caller());
    raise_with_hint(
        PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
        format!("role \"{role}\" may not use {what}: it is outside the role's {} scope", capability.name()),
        &format!("The role's {} scope admits names starting with {}.", capability.name(), scope.shown()),
    )
}

/// Whether the monitoring views show a row named `p_name` (or, for a task,
/// typed `p_other_name`) to the role reading them: always for a role whose
/// monitor capability is unscoped; for a scoped one, when a name is in its
/// scope (a row with no name is then not shown).
#[pg_extern(stable, parallel_restricted)]
fn in_monitor_scope(p_name: Option<Text>, p_other_name: default!(Option<Text>, "NULL")) -> bool {
    match &*of_caller(Capability::Monitor) {
        Scope::Everything => true,
        scope => [p_name, p_other_name].iter().flatten().any(|name| scope.admits(name.bytes())),
    }
}

/// Fired after every statement that changes role_capabilities: when it
/// commits, every backend forgets the scopes it knows.
#[pg_trigger]
fn role_capabilities_changed<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, pgrx::PgTriggerError> {
    unsafe { pg_sys::CacheInvalidateRelcacheByRelid(trigger.relation()?.oid()) };
    Ok(None)
}
