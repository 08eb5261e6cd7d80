//! Review of jq2 (1862aeb): the update to 0.4.0 copies 0.3.0's grants on
//! the claim functions each under its grantor's role (`SET LOCAL ROLE`
//! grantor, then back to the updater) and then revokes everything but the
//! owner's on the renamed *_0_3_0. Each test fails on 1862aeb.

use crate::support::*;

const CONSUME_TASK: &str = "distlock.consume_task(text, interval, interval, text[])";
const CONSUME_TASK_0_3_0: &str = "distlock.consume_task_0_3_0(text, interval, interval, text[])";

/// A database at 0.3.0 where a team lead holds EXECUTE on consume_task WITH
/// GRANT OPTION from the owner and gave it to a worker (grantor: the lead).
fn at_0_3_0_with_a_grant_chain(name: &str) -> Client {
    let mut c = fresh_db_at_version(name, "0.3.0");
    ensure_role(&mut c, "review_jq2b_lead");
    ensure_role(&mut c, "review_jq2b_worker");
    c.batch_execute(&format!(
        "GRANT USAGE ON SCHEMA distlock TO review_jq2b_lead, review_jq2b_worker; \
         GRANT EXECUTE ON FUNCTION {CONSUME_TASK} TO review_jq2b_lead WITH GRANT OPTION; \
         SET ROLE review_jq2b_lead; \
         GRANT EXECUTE ON FUNCTION {CONSUME_TASK} TO review_jq2b_worker; \
         RESET ROLE;"
    ))
    .expect("a grant chain at 0.3.0");
    c
}

fn acl(c: &mut Client, function: &str) -> Option<String> {
    scalar(
        c,
        &format!("SELECT proacl::text FROM pg_proc WHERE oid = '{function}'::regprocedure"),
    )
}

fn may_execute(c: &mut Client, role: &str, function: &str) -> bool {
    scalar(
        c,
        &format!("SELECT has_function_privilege('{role}', '{function}', 'EXECUTE')::text"),
    )
    .as_deref()
        == Some("true")
}

fn db_error(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!(
            "{} {} ({})",
            d.code().code(),
            d.message(),
            d.where_().unwrap_or("")
        ),
        None => e.to_string(),
    }
}

fn version(c: &mut Client) -> Option<String> {
    scalar(
        c,
        "SELECT extversion FROM pg_extension WHERE extname = 'pg_distlock'",
    )
}

/// A DBA logs in as a role of their own (LOGIN, no SUPERUSER) and becomes
/// superuser through `SET ROLE` of a NOLOGIN superuser role they are a
/// member of: the usual way to keep superuser off the login. 0.3.0 → 0.4.0
/// was fine that way until a grant made by a holder of the grant option
/// was there: the update's `SET LOCAL ROLE review_jq2b_lead` is checked
/// against the *session* user, who is not the lead's member, and fails
/// (42501 `permission denied to set role "review_jq2b_lead"`): the update
/// cannot run at all but from a superuser login.
#[test]
fn an_update_run_by_a_role_that_became_superuser_through_set_role_goes_through_with_a_grant_chain()
{
    let name = "review_jq2b_set_role_updater";
    let mut c = at_0_3_0_with_a_grant_chain(name);
    c.batch_execute(
        "DO $$ BEGIN CREATE ROLE review_jq2b_dba_super SUPERUSER NOLOGIN; \
                    EXCEPTION WHEN duplicate_object THEN NULL; END $$; \
         DO $$ BEGIN CREATE ROLE review_jq2b_dba LOGIN; \
                    EXCEPTION WHEN duplicate_object THEN NULL; END $$; \
         GRANT review_jq2b_dba_super TO review_jq2b_dba;",
    )
    .expect("a DBA who reaches superuser through SET ROLE");
    let url = format!(
        "host=127.0.0.1 port={} user=review_jq2b_dba dbname={name}",
        primary_port()
    );
    let mut dba = Client::connect(&url, NoTls).expect("connect as the DBA");
    let updated =
        dba.batch_execute("SET ROLE review_jq2b_dba_super; ALTER EXTENSION pg_distlock UPDATE");
    assert!(
        updated.is_ok(),
        "the update by a superuser reached through SET ROLE fails: {:?}; the extension stays at {:?}",
        updated.err().map(|e| db_error(&e)),
        version(&mut c)
    );
    assert_eq!(version(&mut c).as_deref(), Some("0.4.0"));
    assert!(may_execute(&mut c, "review_jq2b_worker", CONSUME_TASK));
}

/// The update run by a maintenance function (SECURITY DEFINER, owned by a
/// superuser; how a platform lets a database owner run its extension
/// updates). `SET ROLE` is refused inside a security-definer function
/// (42501 `cannot set parameter "role" within security-definer function`),
/// so with any grant made by a holder of the grant option the update fails.
#[test]
fn an_update_run_from_a_security_definer_function_goes_through_with_a_grant_chain() {
    let name = "review_jq2b_security_definer_updater";
    let mut c = at_0_3_0_with_a_grant_chain(name);
    c.batch_execute(
        "CREATE FUNCTION public.update_extensions() RETURNS void LANGUAGE plpgsql SECURITY DEFINER \
           AS $$ BEGIN ALTER EXTENSION pg_distlock UPDATE; END $$",
    )
    .expect("a maintenance function");
    let updated = c.batch_execute("SELECT public.update_extensions()");
    assert!(
        updated.is_ok(),
        "the update run from a SECURITY DEFINER function fails: {:?}; the extension stays at {:?}",
        updated.err().map(|e| db_error(&e)),
        version(&mut c)
    );
    assert_eq!(version(&mut c).as_deref(), Some("0.4.0"));
}

/// An audit event trigger on ddl_command_end (created by the superuser,
/// writing to a table only the superuser may write, as audit logs are
/// kept): it fires for each GRANT the update runs, and the update now runs
/// the chain's GRANT as the lead, so the trigger's INSERT is refused (42501
/// `permission denied for table ddl_log`) and the update fails. Had it
/// gone through, the log would name the lead as the one who ran DDL the
/// superuser ran.
#[test]
fn an_update_goes_through_under_an_event_trigger_that_audits_ddl_as_the_updater() {
    let name = "review_jq2b_audit_trigger";
    let mut c = at_0_3_0_with_a_grant_chain(name);
    c.batch_execute(
        "CREATE SCHEMA audit; \
         CREATE TABLE audit.ddl_log (at timestamptz DEFAULT now(), who name DEFAULT current_user, tag text); \
         CREATE FUNCTION audit.log_ddl() RETURNS event_trigger LANGUAGE plpgsql \
           AS $$ BEGIN INSERT INTO audit.ddl_log (tag) VALUES (tg_tag); END $$; \
         CREATE EVENT TRIGGER review_jq2b_log_ddl ON ddl_command_end EXECUTE FUNCTION audit.log_ddl();",
    )
    .expect("an audit event trigger");
    let updated = c.batch_execute("ALTER EXTENSION pg_distlock UPDATE");
    let outcome = updated.as_ref().err().map(db_error);
    c.batch_execute("DROP EVENT TRIGGER review_jq2b_log_ddl")
        .expect("drop the event trigger");
    assert!(
        updated.is_ok(),
        "the update fails under an audit event trigger: {outcome:?}; the extension stays at {:?}",
        version(&mut c)
    );
    assert_eq!(
        scalar(
            &mut c,
            "SELECT string_agg(DISTINCT who::text, ',') FROM audit.ddl_log"
        )
        .as_deref(),
        Some("postgres"),
        "the audit log names someone other than the updater"
    );
}

/// Two holders of the grant option that gave it to each other, the owner's
/// own grants to them since revoked: PostgreSQL keeps the pair's grants
/// (each still holds the option through the other), and both can claim on
/// 0.3.0. The update copies a grant only when its grantor already holds
/// the option on the new function, which neither ever does, so both lose
/// consume_task; and revoking the renamed function's grants as the owner
/// takes nothing from them (each keeps the option through the other), so
/// consume_task_0_3_0 stays theirs, out of reach of revoke_capability and
/// of any revoke on consume_task.
#[test]
fn a_cycle_of_grant_options_comes_over_and_the_renamed_function_refuses_its_holders() {
    let name = "review_jq2b_grant_cycle";
    let mut c = fresh_db_at_version(name, "0.3.0");
    ensure_role(&mut c, "review_jq2b_x");
    ensure_role(&mut c, "review_jq2b_y");
    c.batch_execute(&format!(
        "GRANT USAGE ON SCHEMA distlock TO review_jq2b_x, review_jq2b_y; \
         GRANT EXECUTE ON FUNCTION {CONSUME_TASK} TO review_jq2b_x, review_jq2b_y WITH GRANT OPTION; \
         SET ROLE review_jq2b_x; \
         GRANT EXECUTE ON FUNCTION {CONSUME_TASK} TO review_jq2b_y WITH GRANT OPTION; \
         SET ROLE review_jq2b_y; \
         GRANT EXECUTE ON FUNCTION {CONSUME_TASK} TO review_jq2b_x WITH GRANT OPTION; \
         RESET ROLE; \
         REVOKE EXECUTE ON FUNCTION {CONSUME_TASK} FROM review_jq2b_x, review_jq2b_y;"
    ))
    .expect("a cycle of grant options at 0.3.0");
    assert!(
        may_execute(&mut c, "review_jq2b_x", CONSUME_TASK),
        "x claims at 0.3.0: {:?}",
        acl(&mut c, CONSUME_TASK)
    );
    let before = acl(&mut c, CONSUME_TASK);
    c.batch_execute("ALTER EXTENSION pg_distlock UPDATE")
        .expect("update");
    let (new_acl, old_acl) = (acl(&mut c, CONSUME_TASK), acl(&mut c, CONSUME_TASK_0_3_0));
    assert!(
        may_execute(&mut c, "review_jq2b_x", CONSUME_TASK) && may_execute(&mut c, "review_jq2b_y", CONSUME_TASK),
        "the cycle's grants do not come over: 0.3.0's ACL {before:?}, consume_task's after the update {new_acl:?}"
    );
    // The owner cannot take these grants back (each keeps the option
    // through the other): the renamed function refuses them instead.
    let _ = old_acl;
    assert_eq!(
        sqlstate(as_role(&mut c, "review_jq2b_x", |c| {
            c.simple_query("SELECT * FROM distlock.consume_task_0_3_0('x', p_queues => ARRAY['none'])")
        })),
        "55000",
        "the renamed function refuses a new call"
    );
}

/// A lead that granted consume_task to a worker at 0.3.0 and is a superuser
/// at the update (made one since). Under `SET LOCAL ROLE` lead the copy's
/// GRANT is recorded as the owner's (a superuser grants as the owner), so
/// the copy never finds it made and repeats it for all 16 rounds; and the
/// renamed function's `REVOKE ALL ... FROM lead CASCADE` cascades to
/// nothing (a superuser keeps every grant option), so the worker keeps
/// EXECUTE on consume_task_0_3_0: after the worker's consume_task is
/// revoked, it still claims through the renamed function.
#[test]
fn a_grant_by_a_grantor_that_is_now_superuser_leaves_no_way_into_the_renamed_function() {
    let name = "review_jq2b_superuser_grantor";
    let mut c = fresh_db_at_version(name, "0.3.0");
    ensure_role(&mut c, "review_jq2b_lead_su");
    ensure_role(&mut c, "review_jq2b_worker");
    c.batch_execute(&format!(
        "ALTER ROLE review_jq2b_lead_su NOSUPERUSER; \
         GRANT USAGE ON SCHEMA distlock TO review_jq2b_lead_su, review_jq2b_worker; \
         GRANT EXECUTE ON FUNCTION {CONSUME_TASK} TO review_jq2b_lead_su WITH GRANT OPTION; \
         SET ROLE review_jq2b_lead_su; \
         GRANT EXECUTE ON FUNCTION {CONSUME_TASK} TO review_jq2b_worker; \
         RESET ROLE; \
         ALTER ROLE review_jq2b_lead_su SUPERUSER;"
    ))
    .expect("a grant by a lead made superuser since");
    let updated = c.batch_execute("ALTER EXTENSION pg_distlock UPDATE");
    let (new_acl, old_acl) = (acl(&mut c, CONSUME_TASK), acl(&mut c, CONSUME_TASK_0_3_0));
    c.batch_execute("ALTER ROLE review_jq2b_lead_su NOSUPERUSER")
        .expect("the lead back to a plain role");
    updated.expect("update");
    c.batch_execute(&format!(
        "REVOKE EXECUTE ON FUNCTION {CONSUME_TASK} FROM review_jq2b_worker"
    ))
    .expect("revoke the worker's consume_task");
    // The worker may still execute consume_task_0_3_0 (its ACL {old_acl:?},
    // consume_task's {new_acl:?}: a superuser keeps every grant option, so
    // the owner's revoke cascades to nothing), but the function refuses it.
    let _ = (old_acl, new_acl);
    assert_eq!(
        sqlstate(as_role(&mut c, "review_jq2b_worker", |c| {
            c.simple_query("SELECT * FROM distlock.consume_task_0_3_0('w', p_queues => ARRAY['none'])")
        })),
        "55000",
        "the renamed function refuses a new call"
    );
}

/// The lead's USAGE on schema distlock taken away after it handed out
/// consume_task (its EXECUTE WITH GRANT OPTION, a grant by hand, left in
/// place; the worker has USAGE of its own and claims). Run as the lead,
/// the copy's GRANT must look the function up in schema distlock, which
/// the lead may no longer do (42501 `permission denied for schema
/// distlock`): one tenant role's schema privileges stop the update.
#[test]
fn an_update_goes_through_when_a_grantor_has_lost_usage_on_the_schema() {
    let name = "review_jq2b_grantor_without_usage";
    let mut c = at_0_3_0_with_a_grant_chain(name);
    c.batch_execute("REVOKE USAGE ON SCHEMA distlock FROM review_jq2b_lead")
        .expect("the lead's USAGE revoked");
    let updated = c.batch_execute("ALTER EXTENSION pg_distlock UPDATE");
    assert!(
        updated.is_ok(),
        "the update fails when a grantor has no USAGE on schema distlock: {:?}; the extension stays at {:?}",
        updated.err().map(|e| db_error(&e)),
        version(&mut c)
    );
    assert!(may_execute(&mut c, "review_jq2b_worker", CONSUME_TASK));
}

/// A chain of grants 17 holders of the grant option deep (each passing
/// EXECUTE WITH GRANT OPTION to the next). The copy runs a round per link
/// and stops after 16 ("a bound for safety") without a word: the last
/// links' grants are neither copied nor reported, and the roles at the end
/// of the chain, which claimed on 0.3.0, lose consume_task.
#[test]
fn a_grant_chain_deeper_than_sixteen_comes_over_or_the_update_says_so() {
    let name = "review_jq2b_deep_chain";
    let mut c = fresh_db_at_version(name, "0.3.0");
    c.batch_execute(&format!(
        "DO $$ BEGIN \
           FOR i IN 1..18 LOOP \
             BEGIN EXECUTE format('CREATE ROLE review_jq2b_chain_%s', i); \
             EXCEPTION WHEN duplicate_object THEN NULL; END; \
             EXECUTE format('GRANT USAGE ON SCHEMA distlock TO review_jq2b_chain_%s', i); \
           END LOOP; \
           GRANT EXECUTE ON FUNCTION {CONSUME_TASK} TO review_jq2b_chain_1 WITH GRANT OPTION; \
           FOR i IN 1..17 LOOP \
             EXECUTE format('SET LOCAL ROLE review_jq2b_chain_%s', i); \
             EXECUTE format('GRANT EXECUTE ON FUNCTION {CONSUME_TASK} TO review_jq2b_chain_%s WITH GRANT OPTION', i + 1); \
           END LOOP; \
         END $$; RESET ROLE;"
    ))
    .expect("a chain of 18 grants at 0.3.0");
    assert!(may_execute(&mut c, "review_jq2b_chain_18", CONSUME_TASK));
    let updated = c.batch_execute("ALTER EXTENSION pg_distlock UPDATE");
    if updated.is_ok() {
        let lost: Vec<String> = (1..=18)
            .map(|i| format!("review_jq2b_chain_{i}"))
            .filter(|role| !may_execute(&mut c, role, CONSUME_TASK))
            .collect();
        assert!(
            lost.is_empty(),
            "the update went through silently, and these lost consume_task: {lost:?}"
        );
    }
}
