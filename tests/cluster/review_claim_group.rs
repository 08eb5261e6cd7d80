//! Claims hand the consumer the job's group (issue 49, item 1: the last
//! `group_key` column of consume_task, consume_tasks and
//! settle_and_consume_tasks), as a fresh-eyes review attacked it: each test
//! fails at c174b3a.
//!
//! (Four tests already in the suite also fail at c174b3a, because they
//! still require `queue` to be the last column: queue_tests.rs
//! queue_claims_name_each_jobs_queue_in_their_last_column, job_queue.rs
//! consumers_learn_each_jobs_queue_from_all_three_claim_functions and
//! a_0_3_0_database_keeps_0_3_0s_columns_until_its_update, and upgrade.rs
//! a_populated_0_3_0_database_upgrades_in_place through check_0_3_0_state.)

use std::path::PathBuf;

use crate::support::*;

/// The result columns of `call`, as prepared (nothing runs).
fn columns_of(c: &mut Client, call: &str) -> Vec<String> {
    let statement = c.prepare(&format!("SELECT * FROM {call}")).unwrap_or_else(|e| panic!("{call}: {e}"));
    statement.columns().iter().map(|column| column.name().to_string()).collect()
}

/// The inline code spans of `text`, in order (a span never crosses a
/// backtick: what lies between the 2k+1-th and 2k+2-th backticks).
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// docs/queue.md says which columns settle_and_consume_tasks returns after
/// `worker_id`, in one bullet, and which of them is last ("so that readers
/// of the columns before it by position kept working"). c174b3a appends
/// `group_key` after `queue`, but the bullet still names `queue` as the
/// last column and never mentions `group_key`: a reader who follows the
/// docs (reading the last column by position for the queue, or a row type
/// built from the bullet) gets the group where the docs promise the queue.
#[test]
fn review_claim_group_the_docs_of_settle_and_consume_tasks_name_every_column_and_the_real_last() {
    let db = fresh_db("review_claim_group_docs");
    let mut c = connect(&db);
    let columns = columns_of(&mut c, "distlock.settle_and_consume_tasks(2, 'c')");
    let worker = columns.iter().position(|column| column == "worker_id").expect("a worker_id column");
    let after: Vec<&String> = columns[worker + 1..].iter().collect();
    let last = columns.last().expect("columns");

    let page = std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/queue.md")).expect("docs/queue.md");
    let opening = "- It returns `consume_tasks`' columns up to `worker_id`";
    let start = page.find(opening).expect("docs/queue.md describes settle_and_consume_tasks' columns");
    let rest = &page[start + 2..];
    let bullet = &rest[..rest.find("\n- ").unwrap_or(rest.len())];

    for column in &after {
        assert!(
            bullet.contains(&format!("`{column}`")),
            "settle_and_consume_tasks returns {columns:?}, but docs/queue.md's description of its columns after \
             worker_id never names `{column}`:\n{bullet}"
        );
    }
    if let Some(at) = bullet.find(" (last") {
        let called_last = code_spans(&bullet[..at]).last().copied().unwrap_or_default();
        assert_eq!(
            called_last,
            last.as_str(),
            "docs/queue.md calls `{called_last}` settle_and_consume_tasks' last column; the function returns {columns:?}"
        );
    }
}

/// 0.3.0's claim functions, renamed by the update, refuse new calls (55000)
/// and tell the caller what to call instead. At c174b3a the hint of all
/// three (src/compat/v0_3_0.rs, refuse_if_renamed) still says that 0.4.0's
/// function "returns each job's queue as its last column", while its last
/// column is `group_key`: a consumer that follows the hint and reads the
/// last column for the queue routes every job by its group (NULL for most).
#[test]
fn review_claim_group_a_renamed_0_3_0_claim_tells_the_new_functions_last_column_right() {
    let name = "review_claim_group_hint";
    let mut c = fresh_db_at_version(name, "0.3.0");
    c.batch_execute("ALTER EXTENSION pg_distlock UPDATE").expect("update to this release");
    let mut c = connect(name);
    for (renamed, current) in [
        ("distlock.consume_task_0_3_0('w')", "distlock.consume_task('c')"),
        ("distlock.consume_tasks_0_3_0(2, 'w')", "distlock.consume_tasks(2, 'c')"),
        ("distlock.settle_and_consume_tasks_0_3_0(2, 'w')", "distlock.settle_and_consume_tasks(2, 'c')"),
    ] {
        let columns = columns_of(&mut c, current);
        let last = columns.last().expect("columns").clone();
        let refused =
            c.batch_execute(&format!("SELECT * FROM {renamed}")).expect_err("a renamed 0.3.0 function refuses new calls");
        let refused = refused.as_db_error().unwrap_or_else(|| panic!("{renamed}: not a server error: {refused}"));
        assert_eq!(refused.code().code(), "55000", "{renamed}: {}", refused.message());
        let hint = refused.hint().unwrap_or_default();
        assert!(
            !hint.contains("last column") || hint.contains(&last),
            "{renamed}'s hint says: {hint:?}; but {current} returns {columns:?}, whose last column is `{last}`"
        );
    }
}
