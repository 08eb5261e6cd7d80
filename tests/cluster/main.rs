//! Multi-connection tests against a real cluster started by scripts/test.sh:
//! a primary (pg_cron and pg_distlock preloaded), its streaming standby,
//! and a plain cluster without preload (table mode). Each test makes
//! its own database. Run with --test-threads=1: one test restarts the server.

mod support;

mod checker;
mod contention;
mod docs;
mod failover;
mod faults;
mod features;
mod fleet;
mod ha;
mod history;
mod lease_claims;
mod lock_tags;
mod locks;
mod names;
mod nemesis;
mod operations;
mod pooler;
mod queue_wait;
mod privileges;
mod recovery;
mod replication_modes;
mod scopes;
mod search_path;
mod snowflake;
mod tokens;
mod upgrade;
