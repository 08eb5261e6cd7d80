//! Sessions whose library is older than the installed SQL may read but not
//! write (issue 44, items 6 and 12); a newer library serves older SQL. The real case, a session that kept
//! an older release's library across ALTER EXTENSION UPDATE, is tested with
//! the releases' own libraries in upgrade.rs (scripts/test_real_upgrades.sh);
//! here the guard of one table names another version, as the next release's
//! update will.

use crate::support::*;

#[test]
fn a_session_whose_library_is_older_than_the_installed_sql_may_read_but_not_write() {
    let db = fresh_db("library_guard");
    let mut c = connect(&db);
    let guards: Vec<String> = c
        .query(
            "SELECT DISTINCT encode(t.tgargs, 'escape') FROM pg_trigger t \
              WHERE t.tgname = 'library_guard' AND t.tgrelid::regclass::text LIKE 'distlock.%'",
            &[],
        )
        .expect("guards")
        .iter()
        .map(|r| r.get(0))
        .collect();
    let version = scalar(&mut c, "SELECT extversion FROM pg_extension WHERE extname = 'pg_distlock'").expect("version");
    assert_eq!(guards, [format!("{version}\\000")], "every guard names the installed version");
    let guarded = count(
        &mut c,
        "SELECT 1 FROM pg_class r WHERE r.relnamespace = 'distlock'::regnamespace AND r.relkind = 'r' \
           AND NOT EXISTS (SELECT 1 FROM pg_trigger t WHERE t.tgrelid = r.oid AND t.tgname = 'library_guard')",
    );
    assert_eq!(guarded, 0, "a pg_distlock table without a guard");

    c.batch_execute("SELECT distlock.enqueue_task('before')").expect("writes pass while the versions agree");
    c.batch_execute(
        "DROP TRIGGER library_guard ON distlock.task_queue; \
         CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.task_queue \
           FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('9.9.9')",
    )
    .expect("a guard of another version");
    let refused = c.batch_execute("SELECT distlock.enqueue_task('after')").expect_err("refused");
    let error = refused.as_db_error().expect("a server error");
    assert_eq!(error.code().code(), "55000");
    assert!(error.message().contains("9.9.9"), "{}", error.message());
    assert!(error.hint().is_some_and(|h| h.contains("Reconnect")), "{:?}", error.hint());
    let refused = c.batch_execute("SELECT * FROM distlock.consume_task('w')");
    assert_eq!(sqlstate(refused), "55000", "a claim writes too");
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.task_queue"), 1, "reads still answer");

    // A newer library serves older SQL until ALTER EXTENSION UPDATE runs.
    c.batch_execute(
        "DROP TRIGGER library_guard ON distlock.task_queue; \
         CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.task_queue \
           FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.3.9')",
    )
    .expect("a guard of an older version");
    c.batch_execute("SELECT distlock.enqueue_task('newer library')").expect("a newer library writes");
}
