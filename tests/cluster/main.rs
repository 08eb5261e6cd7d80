//! Multi-connection tests against a real cluster started by scripts/test.sh:
//! a primary in shared-memory mode (pg_distlock preloaded, or the DSM
//! registry's segment), its streaming standby, and a plain cluster in table
//! mode. Each test makes
//! its own database. Run with --test-threads=1: one test restarts the server.

mod default_privileges;
mod support;

mod checker;
mod claim_frontier;
mod claim_order;
mod contention;
mod docs;
mod failover;
mod faults;
mod features;
mod fencing_identity;
mod fleet;
mod ha;
mod history;
mod job_queue;
mod lease_claims;
mod library_guard;
mod liveness;
mod lock_tags;
mod lock_owner_view;
mod locks;
mod names;
mod nemesis;
mod operations;
mod owner_deadlocks;
mod review_owner_deadlocks;
mod review_owner_deadlocks2;
mod review_owner_marks;
mod review_owner_marks2;
mod pooler;
mod queue_admin;
mod queue_counters;
mod queue_limits;
mod queue_nemesis;
mod queue_scopes;
mod queue_wait;
mod rate_limit_keys;
mod privileges;
mod recovery;
mod replication_modes;
mod review_33;
mod review_35;
mod review_38;
mod review_41;
mod review_41b;
mod review_41c;
mod review_44;
mod review_44b;
mod review_45;
mod review_46_7;
mod review_46_8;
mod review_46_9;
mod review_frontier;
mod review_frontier2;
mod review_frontier3;
mod review_frontier4;
mod review_attempts;
mod review_session;
mod review_jq2b;
mod review_metrics;
mod review_metrics2;
mod review_metrics3;
mod run_now;
mod scopes;
mod search_path;
mod shared_memory;
mod snowflake;
mod tokens;
mod unique_jobs;
mod upgrade;
