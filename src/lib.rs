//! pg_distlock: distributed locks, scheduled-task claims and their recovery,
//! served from inside PostgreSQL.

use pgrx::prelude::*;

mod access;
mod backend_status;
mod client_connection;
mod compat;
mod coordination;
mod errors;
mod gucs;
mod hashing;
mod library_guard;
mod lock_key_secret;
mod lock_keys;
mod lock_wait;
mod locks;
mod optimistic;
mod pg_compat;
mod plans;
mod proc_locks;
mod queue;
mod ratelimit;
mod schedule;
mod scopes;
mod session_locks;
mod shared;
mod snowflake;
mod subtransaction;
mod sweep;
mod text;
mod tasks;
mod version;
#[cfg(any(test, feature = "pg_test"))]
mod test_sql;
mod xact;

::pgrx::pg_module_magic!(name, version);

// Tables, views and grants are plain SQL, kept in sql/ and ordered here.
pgrx::extension_sql_file!("../sql/schema.sql", name = "schema", bootstrap);
pgrx::extension_sql_file!(
    "../sql/locks.sql",
    name = "locks",
    requires = ["schema", locks::stats::lock_stats_entries, scopes::in_monitor_scope]
);
pgrx::extension_sql_file!(
    "../sql/views.sql",
    name = "views",
    requires = [
        "schema",
        "locks",
        lock_keys::task_lock_class,
        scopes::in_monitor_scope,
        backend_status::lease_backend_connected,
        locks::owner_names::lock_owner_published
    ]
);
pgrx::extension_sql_file!("../sql/queue.sql", name = "queue", requires = ["schema", scopes::in_monitor_scope]);
pgrx::extension_sql_file!("../sql/ratelimit.sql", name = "ratelimit", requires = ["schema"]);
pgrx::extension_sql_file!("../sql/snowflake.sql", name = "snowflake", requires = ["schema"]);
pgrx::extension_sql_file!("../sql/leases.sql", name = "leases", requires = ["schema", scopes::in_monitor_scope]);
pgrx::extension_sql_file!("../sql/sweep.sql", name = "sweep", requires = ["schema"]);
pgrx::extension_sql_file!("../sql/lock_key_secret.sql", name = "lock_key_secret", requires = ["schema"]);
pgrx::extension_sql_file!(
    "../sql/access.sql",
    name = "access",
    requires = ["schema", scopes::role_capabilities_changed]
);
pgrx::extension_sql_file!(
    "../sql/guard.sql",
    name = "guard",
    requires = ["schema", "locks", "queue", "ratelimit", "snowflake", "leases", "sweep", "lock_key_secret", "access", "library_guard"]
);
pgrx::extension_sql_file!("../sql/grants.sql", name = "grants", finalize);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    gucs::register();
    shared::init();
    xact::register_callbacks();
    queue::counters::register_callbacks();
}

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        // The unit tests exercise table mode on every version; the cluster
        // tests cover shared memory, preloaded and from the DSM registry.
        #[cfg(not(feature = "pg15"))]
        return vec!["distlock.dynamic_shared_memory = off"];
        #[cfg(feature = "pg15")]
        vec![]
    }
}
