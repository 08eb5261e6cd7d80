//! 0.3.0's entry points, bound as 0.3.0's install script binds them, still
//! return 0.3.0's columns (a C function must return exactly the columns its
//! SQL declares); tests/cluster/job_queue.rs calls them in a database
//! created at 0.3.0.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_sql::{enqueue, one, required, run};

    const RELEASE_0_3_0: &str = include_str!("../../sql/pg_distlock--0.3.0.sql");

    /// `CREATE FUNCTION "name"(...) ... AS 'MODULE_PATHNAME', 'symbol';` from
    /// 0.3.0's frozen script, created in schema v030 with this library's path.
    fn create_as_0_3_0(name: &str, symbol: &str) {
        let start = RELEASE_0_3_0
            .find(&format!("CREATE  FUNCTION \"{name}\"("))
            .unwrap_or_else(|| panic!("{name} in 0.3.0's script"));
        let binding = format!("AS 'MODULE_PATHNAME', '{symbol}';");
        let end = start + RELEASE_0_3_0[start..].find(&binding).expect("its binding") + binding.len();
        let library = required::<String>(
            "SELECT probin FROM pg_catalog.pg_proc WHERE oid = 'distlock.lock_id(text)'::pg_catalog.regprocedure",
        );
        let definition = RELEASE_0_3_0[start..end]
            .replacen("CREATE  FUNCTION \"", "CREATE FUNCTION v030.\"", 1)
            .replace("'MODULE_PATHNAME'", &format!("'{library}'"));
        run(&definition);
    }

    /// The columns of one row of `call`, in order, as `name=value`.
    fn row_of(call: &str) -> Option<String> {
        one::<String>(&format!(
            "SELECT string_agg(j.key || '=' || coalesce(j.value, 'NULL'), ',' ORDER BY j.ordinality) \
               FROM (SELECT pg_catalog.row_to_json(c) AS r FROM {call} c LIMIT 1) o, \
                    pg_catalog.json_each_text(o.r) WITH ORDINALITY j"
        ))
    }

    #[pg_test]
    fn compat_0_3_0_claims_return_0_3_0s_columns() {
        run("CREATE SCHEMA v030");
        create_as_0_3_0("consume_task", "consume_task_from_queues_wrapper");
        create_as_0_3_0("consume_tasks", "consume_tasks_from_queues_wrapper");
        create_as_0_3_0("settle_and_consume_tasks", "settle_and_consume_tasks_wrapper");
        let a = enqueue("'a', '{}', now(), 0, 5, 'qa'");
        let b = enqueue("'b', '{}', now(), 0, 5, 'qb'");
        let c = enqueue("'c', '{}', now(), 0, 5, 'qa'");
        let fields = |row: Option<String>| -> Vec<String> {
            row.expect("a row").split(',').map(|f| f.split('=').next().unwrap_or_default().to_string()).collect()
        };
        let columns = "task_id,task_name,payload,attempts,max_attempts,lease_expires_at,priority,worker_id";
        let one_job = row_of("v030.consume_task('w1', p_queues => ARRAY['qa'])");
        assert_eq!(fields(one_job.clone()).join(","), columns, "{one_job:?}");
        assert!(one_job.as_deref().is_some_and(|r| r.starts_with(&format!("task_id={a},task_name=a,")) && r.ends_with(",priority=0,worker_id=w1")), "{one_job:?}");
        let batch = row_of("v030.consume_tasks(5, 'w2', p_queues => ARRAY['qb'])");
        assert_eq!(fields(batch.clone()).join(","), columns, "{batch:?}");
        assert!(batch.as_deref().is_some_and(|r| r.starts_with(&format!("task_id={b},")) && r.ends_with(",worker_id=w2")), "{batch:?}");
        let settled = row_of(&format!("v030.settle_and_consume_tasks(1, 'w1', p_completed => ARRAY[{a}]::bigint[], p_queues => ARRAY['qa'])"));
        assert_eq!(fields(settled.clone()).join(","), format!("{columns},outcome"), "{settled:?}");
        assert!(
            settled.as_deref().is_some_and(|r| r.starts_with(&format!("task_id={c},")) && r.ends_with(",worker_id=w1,outcome=claimed")),
            "{settled:?}"
        );
        assert_eq!(one::<String>(&format!("SELECT status FROM distlock.jobs WHERE id = {a}")), Some("completed".into()));
    }
}
