//! Review of jq2 (02cffcc): the update to 0.4.0 renames 0.3.0's claim
//! functions (*_0_3_0) and gives the new ones 0.3.0's grants. Each test
//! fails on 02cffcc. (The first now takes the path the fix made: the update
//! refuses under the view, which is made again after it.)

use std::process::Command;

use crate::support::*;

/// A view of the user over consume_task, made at 0.3.0 (the update went
/// through with it: the view followed the function to consume_task_0_3_0).
/// pg_dump writes the view over `distlock.consume_task_0_3_0(...)` but not
/// that function, an extension member; pg_restore's CREATE EXTENSION makes
/// 0.4.0 fresh, which has no *_0_3_0, so the restore fails (42883 `function
/// distlock.consume_task_0_3_0(text, p_queues => text[]) does not exist`)
/// and the view is lost: a dump of an updated database cannot be restored
/// as it is. Before the update the same dump restores.
#[test]
fn a_dump_of_a_database_updated_to_0_4_0_with_a_view_over_consume_task_restores() {
    let name = "review_41c_dump_view";
    let mut c = fresh_db_at_version(name, "0.3.0");
    c.batch_execute(
        "CREATE VIEW public.next_mail AS \
           SELECT task_id, task_name FROM distlock.consume_task('viewer', p_queues => ARRAY['mail'])",
    )
    .expect("a view over consume_task at 0.3.0");
    // The update now refuses while the view stands (job_queue.rs checks the
    // error); dropped and made again after it, the view dumps and restores.
    assert_eq!(sqlstate(c.batch_execute("ALTER EXTENSION pg_distlock UPDATE")), "2BP01");
    c.batch_execute("DROP VIEW public.next_mail; ALTER EXTENSION pg_distlock UPDATE").expect("update");
    c.batch_execute(
        "CREATE VIEW public.next_mail AS \
           SELECT task_id, task_name, queue FROM distlock.consume_task('viewer', p_queues => ARRAY['mail'])",
    )
    .expect("the view made again over 0.4.0's consume_task");
    let dump = format!("/tmp/pg_distlock_review_41c_{}.pgdump", std::process::id());
    pg_tool(primary_port(), "pg_dump", &["-Fc", "-f", &dump, name]);
    let restored = "review_41c_dump_view_restored";
    let mut admin = connect_to(primary_port(), "postgres", "cluster-test");
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {restored} WITH (FORCE)")).expect("drop");
    admin.batch_execute(&format!("CREATE DATABASE {restored}")).expect("create database");
    let output = Command::new(pg_bin("pg_restore"))
        .args(["-h", "127.0.0.1", "-p", &primary_port().to_string(), "-U", "postgres"])
        .args(["--exit-on-error", "-d", restored, &dump])
        .output()
        .expect("pg_restore");
    let _ = std::fs::remove_file(&dump);
    let views = if output.status.success() {
        count(&mut connect(restored), "SELECT 1 FROM pg_views WHERE viewname = 'next_mail'")
    } else {
        0
    };
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {restored} WITH (FORCE)")).expect("drop");
    assert!(
        output.status.success() && views == 1,
        "the dump of the updated database does not restore: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A grant chain on consume_task at 0.3.0: the owner gave EXECUTE to a team
/// lead WITH GRANT OPTION, who gave it to a worker role. The review found
/// the worker's EXECUTE on the new consume_task granted by the owner, so
/// that revoking the lead's grant option with CASCADE left the worker able
/// to claim. Remaking each grant as its grantor (SET ROLE) broke the update
/// in common settings (review_jq2b.rs), so the decision: such a grant comes
/// over granted by the owner, and the update names it in a WARNING.
#[test]
fn a_grant_made_under_a_grant_option_comes_over_granted_by_the_owner_and_is_named() {
    let name = "review_41c_grant_chain";
    let mut c = fresh_db_at_version(name, "0.3.0");
    ensure_role(&mut c, "review_41c_lead");
    ensure_role(&mut c, "review_41c_worker");
    let consume_task = "distlock.consume_task(text, interval, interval, text[])";
    c.batch_execute(&format!(
        "GRANT USAGE ON SCHEMA distlock TO review_41c_lead, review_41c_worker; \
         GRANT EXECUTE ON FUNCTION {consume_task} TO review_41c_lead WITH GRANT OPTION; \
         SET ROLE review_41c_lead; \
         GRANT EXECUTE ON FUNCTION {consume_task} TO review_41c_worker; \
         RESET ROLE;"
    ))
    .expect("a grant chain at 0.3.0");
    drop(c);
    let (mut c, notices) = crate::privileges::connect_keeping_notices(primary_port(), name);
    c.batch_execute("ALTER EXTENSION pg_distlock UPDATE").expect("update");
    let worker_may = format!("SELECT has_function_privilege('review_41c_worker', '{consume_task}', 'EXECUTE')::text");
    assert_eq!(scalar(&mut c, &worker_may).as_deref(), Some("true"), "the worker keeps consume_task");
    let warned = notices.lock().expect("notices").clone();
    assert!(
        warned.iter().any(|n| n.contains("review_41c_worker by the owner now, not by review_41c_lead")),
        "the flattened grant is named: {warned:?}"
    );
    c.batch_execute(&format!("REVOKE EXECUTE ON FUNCTION {consume_task} FROM review_41c_worker"))
        .expect("revoked by itself, as the WARNING's hint says");
    assert_eq!(scalar(&mut c, &worker_may).as_deref(), Some("false"));
}
