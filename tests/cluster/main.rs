//! Multi-connection tests against a real cluster started by scripts/test.sh:
//! a primary (pg_cron preloaded) and a streaming standby. Each test makes
//! its own database. Run with --test-threads=1: one test restarts the server.

mod support;

mod contention;
mod operations;
mod recovery;
