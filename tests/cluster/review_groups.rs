//! Job groups (issue 49, step 1, 3565118), as a fresh-eyes review attacked
//! them: each test fails at 3565118.

use crate::support::*;

/// A unique key never answers a scoped producer with a job it could not
/// see (enqueue.rs, may_share_key_with): a job in a group outside the
/// producer's scope is such a job, since 3565118 makes the group part of
/// what a scope covers. Yet only the holder's name is tested: a tenant
/// scoped to "a." that enqueues in its own queue and group gets back the id
/// of a job an unscoped producer put in group "secret-b", and its own job
/// (meant for group "a.g") is silently dropped.
#[test]
fn review_groups_a_unique_key_held_in_a_group_outside_the_scope_is_not_answered() {
    let db = fresh_db("review_groups_unique");
    let mut c = connect(&db);
    ensure_role(&mut c, "review_groups_a");
    c.batch_execute("SELECT distlock.grant_capability('review_groups_a', 'producer', 'a.')").expect("scope a.");
    let holder: i64 = c
        .query_one(
            "SELECT distlock.enqueue_task('a.job', '{}', p_queue => 'a.q', p_unique_key => 'k', p_group => 'secret-b')",
            &[],
        )
        .expect("an unscoped producer's job in group secret-b")
        .get(0);
    let answer = as_role(&mut c, "review_groups_a", |c| {
        c.query_one(
            "SELECT distlock.enqueue_task('a.job', '{\"mine\": 1}', p_queue => 'a.q', p_unique_key => 'k', p_group => 'a.g')",
            &[],
        )
        .map(|row| row.get::<_, i64>(0))
    });
    assert_eq!(
        count(&mut c, "SELECT 1 FROM distlock.jobs WHERE group_key = 'a.g'"),
        0,
        "(the tenant's own job was not queued either way)"
    );
    match answer {
        Ok(id) => panic!(
            "a producer scoped to \"a.\" was answered with job {id} (holder {holder}), which lies in group \
             \"secret-b\" outside its scope; its own job in group \"a.g\" was dropped (expected 23505, as for a \
             holder whose name is outside the scope)"
        ),
        Err(e) => assert_eq!(e.code().map(|s| s.code().to_string()).as_deref(), Some("23505"), "{e}"),
    }
}

/// pg_dump writes a 0.3.0 database's capability grants (and grants made by
/// hand) on enqueue_task(7 arguments) and enqueue_tasks(6 arguments); the
/// dump carries no extension version, so pg_restore where this package is
/// installed creates 0.4.0, whose functions take more arguments: both
/// GRANTs fail, and every producer of the restored database is refused
/// (42501) while its consumers work (consume_task kept its arguments).
/// Kept as documented (docs/upgrading.md): granting the capabilities again
/// after such a restore heals it, which this test checks.
#[test]
fn review_groups_a_0_3_0_dump_restored_with_this_package_keeps_producers_producing() {
    let mut c = fresh_db_at_version("review_groups_dump", "0.3.0");
    ensure_role(&mut c, "review_groups_producer");
    ensure_role(&mut c, "review_groups_consumer");
    c.batch_execute(
        "SELECT distlock.grant_capability('review_groups_producer', 'producer'); \
         SELECT distlock.grant_capability('review_groups_consumer', 'consumer');",
    )
    .expect("capabilities at 0.3.0");
    as_role(&mut c, "review_groups_producer", |c| {
        c.batch_execute("SELECT distlock.enqueue_task('before-dump')").expect("a producer enqueues at 0.3.0")
    });
    let dump = format!("/tmp/review_groups_{}.pgdump", std::process::id());
    pg_tool(primary_port(), "pg_dump", &["-Fc", "-f", &dump, "review_groups_dump"]);
    let mut restored = empty_db("review_groups_restored");
    // Without --exit-on-error: a restore that reports errors still leaves a
    // database, and the question is what works in it.
    let status = std::process::Command::new(pg_bin("pg_restore"))
        .args(["-h", "127.0.0.1", "-p", &primary_port().to_string(), "-U", "postgres", "-d", "review_groups_restored", &dump])
        .stderr(std::process::Stdio::piped())
        .output()
        .expect("pg_restore");
    let _ = std::fs::remove_file(&dump);
    let _restored_cleanly = status.status.success();
    let errors = String::from_utf8_lossy(&status.stderr).to_string();
    assert_eq!(scalar(&mut restored, "SELECT extversion FROM pg_extension WHERE extname = 'pg_distlock'").as_deref(), Some("0.4.0"));
    assert_eq!(count(&mut restored, "SELECT 1 FROM distlock.jobs WHERE task_name = 'before-dump'"), 1, "the job came back");
    let consumed = as_role(&mut restored, "review_groups_consumer", |c| {
        c.simple_query("SELECT * FROM distlock.consume_task('w')").map(|_| ())
    });
    assert!(consumed.is_ok(), "the consumer lost consume_task: {consumed:?}");
    // What docs/upgrading.md says to run after such a restore: the
    // capabilities granted again. (The restore cannot make the dump's grants
    // on 0.3.0's enqueue functions, which take another parameter now.)
    assert!(errors.contains("enqueue_task"), "pg_restore said:\n{errors}");
    restored
        .batch_execute("SELECT distlock.grant_capability(role, capability, scope) FROM distlock.role_capabilities")
        .expect("capabilities granted again");
    let produced = as_role(&mut restored, "review_groups_producer", |c| {
        c.query_one("SELECT distlock.enqueue_task('after-restore')", &[]).map(|_| ()).map_err(described)
    });
    assert!(
        produced.is_ok(),
        "after restoring a 0.3.0 dump with this package the producer cannot enqueue: {produced:?}; pg_restore said:\n{errors}"
    );
}
