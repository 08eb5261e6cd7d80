//! Job groups (issue 49, item 1): a job keeps the group it was queued in
//! through every move, claims, takeovers, failures and completions included,
//! and each claim hands it to the consumer. Claims do not act on groups yet; tests/cluster/queue_groups.rs covers
//! producers' scopes.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_sql::{assert_sqlstate, enqueue, one, run};

    fn group_of(job: i64) -> Option<String> {
        one::<String>(&format!("SELECT coalesce(group_key, '-') FROM distlock.jobs WHERE id = {job}"))
    }

    #[pg_test]
    fn groups_enqueue_keeps_the_group_and_none_by_default() {
        let grouped = enqueue("'g', '{}', now(), 0, 5, 'groups-q', NULL, 'customer:7'");
        let named = enqueue("'g', p_queue => 'groups-q', p_group => 'customer:8'");
        let keyed = enqueue("'g', p_queue => 'groups-q', p_unique_key => 'k', p_group => 'customer:9'");
        let plain = enqueue("'g', p_queue => 'groups-q'");
        assert_eq!(group_of(grouped), Some("customer:7".into()));
        assert_eq!(group_of(named), Some("customer:8".into()));
        assert_eq!(group_of(keyed), Some("customer:9".into()));
        assert_eq!(group_of(plain), Some("-".into()));
        // A unique key is the queue's, whatever the group: the holder answers.
        assert_eq!(
            one::<i64>("SELECT distlock.enqueue_task('g', p_queue => 'groups-q', p_unique_key => 'k', p_group => 'other')"),
            Some(keyed)
        );
        // (The ids first: a statement does not see what its own call wrote.)
        let ids = one::<String>(
            "SELECT string_agg(id::text, ',') FROM distlock.enqueue_tasks('many', ARRAY['{}', '{}']::jsonb[], \
                    p_queue => 'groups-q', p_group => 'batch') AS e(id)",
        );
        let plain_many = one::<i64>("SELECT id FROM distlock.enqueue_tasks('many', ARRAY['{}']::jsonb[], p_queue => 'groups-q') e(id)");
        assert_eq!(
            one::<String>(&format!(
                "SELECT string_agg(coalesce(group_key, '-'), ',' ORDER BY id) FROM distlock.jobs \
                  WHERE id IN ({}, {})",
                ids.unwrap_or_default(),
                plain_many.unwrap_or_default()
            )),
            Some("batch,batch,-".into())
        );
    }

    /// A group is a name: not blank, at most 1000 bytes (it must fit an
    /// index entry beside its queue), checked by both functions.
    #[pg_test]
    fn groups_refuse_blank_and_overlong_groups() {
        assert_sqlstate("distlock.enqueue_task('g', p_group => '')", "22023");
        assert_sqlstate("distlock.enqueue_task('g', p_group => '   ')", "22023");
        assert_sqlstate("distlock.enqueue_task('g', p_group => repeat('x', 1001))", "22023");
        assert_sqlstate("distlock.enqueue_tasks('g', ARRAY['{}']::jsonb[], p_group => '')", "22023");
        assert_sqlstate("distlock.enqueue_tasks('g', ARRAY['{}']::jsonb[], p_group => repeat('x', 1001))", "22023");
        assert_eq!(one::<i64>("SELECT count(*) FROM distlock.jobs WHERE task_name = 'g'"), Some(0));
        let longest = enqueue("'g', p_group => repeat('x', 1000)");
        assert_eq!(one::<i32>(&format!("SELECT length(group_key) FROM distlock.jobs WHERE id = {longest}")), Some(1000));
    }

    /// The claim moves a job's row (a delete and an insert): the group goes
    /// along, through a failure, a takeover of an expired lease, a death at
    /// a takeover, and into the archive of completed jobs, by each way of
    /// completing.
    #[pg_test]
    fn groups_follow_a_job_through_every_move() {
        let failed = enqueue("'g', p_queue => 'groups-moves', p_group => 'a', p_priority => 3");
        run("SELECT * FROM distlock.consume_task('w1', p_queues => ARRAY['groups-moves'])");
        assert_eq!(group_of(failed), Some("a".into()), "claimed");
        assert_eq!(one::<bool>(&format!("SELECT distlock.fail_task({failed}, 'boom', 'w1')")), Some(true));
        assert_eq!(group_of(failed), Some("a".into()), "failed");
        run(&format!("UPDATE distlock.task_queue SET run_after = now() - interval '1 second' WHERE id = {failed}"));
        // Taken over from an expired lease.
        run("SELECT * FROM distlock.consume_task('slow', '1 millisecond', p_queues => ARRAY['groups-moves'])");
        run("SELECT pg_sleep(0.01)");
        assert_eq!(
            one::<i64>("SELECT task_id FROM distlock.consume_task('w2', p_queues => ARRAY['groups-moves'])"),
            Some(failed)
        );
        assert_eq!(group_of(failed), Some("a".into()), "taken over");
        assert_eq!(one::<bool>(&format!("SELECT distlock.complete_task({failed}, 'w2')")), Some(true));
        assert_eq!(
            one::<String>(&format!("SELECT status || ':' || group_key FROM distlock.jobs WHERE id = {failed}")),
            Some("completed:a".into()),
            "completed"
        );
        assert_eq!(one::<String>(&format!("SELECT group_key FROM distlock.completed_jobs WHERE id = {failed}")), Some("a".into()));

        // complete_tasks and settle_and_consume_tasks archive theirs too.
        let many = enqueue("'g', p_queue => 'groups-moves', p_group => 'b'");
        let settled = enqueue("'g', p_queue => 'groups-moves', p_group => 'c'");
        run("SELECT * FROM distlock.consume_tasks(2, 'w3', p_queues => ARRAY['groups-moves'])");
        assert_eq!(one::<i64>(&format!("SELECT count(*) FROM distlock.complete_tasks(ARRAY[{many}], 'w3')")), Some(1));
        run(&format!("SELECT * FROM distlock.settle_and_consume_tasks(1, 'w3', p_completed => ARRAY[{settled}])"));
        assert_eq!(
            one::<String>(&format!(
                "SELECT string_agg(group_key, ',' ORDER BY id) FROM distlock.completed_jobs WHERE id IN ({many}, {settled})"
            )),
            Some("b,c".into())
        );

        // A job whose last attempt ran out dies at its takeover, in its group.
        let dies = enqueue("'g', p_queue => 'groups-dies', p_group => 'd', p_max_attempts => 1");
        run("SELECT * FROM distlock.consume_task('slow', '1 millisecond', p_queues => ARRAY['groups-dies'])");
        run("SELECT pg_sleep(0.01)");
        run("SELECT * FROM distlock.consume_task('w4', p_queues => ARRAY['groups-dies'])");
        assert_eq!(
            one::<String>(&format!("SELECT status || ':' || group_key FROM distlock.jobs WHERE id = {dies}")),
            Some("dead:d".into())
        );
    }

    /// Each way of claiming hands the consumer the job's group (the last
    /// column), NULL for a job without one: from every queue, from named
    /// queues, from a limited queue, a takeover, and settle_and_consume_tasks.
    #[pg_test]
    fn groups_are_handed_to_the_consumer_by_every_claim() {
        let grouped = enqueue("'g', p_queue => 'groups-told', p_group => 'x', p_priority => 9");
        let plain = enqueue("'g', p_queue => 'groups-told', p_priority => 8");
        assert_eq!(
            one::<String>("SELECT task_id || ':' || coalesce(group_key, '-') FROM distlock.consume_task('w1')"),
            Some(format!("{grouped}:x")),
            "every queue"
        );
        assert_eq!(
            one::<String>(
                "SELECT task_id || ':' || coalesce(group_key, '-') FROM distlock.consume_task('w1', p_queues => ARRAY['groups-told'])"
            ),
            Some(format!("{plain}:-")),
            "a named queue, no group"
        );
        let batch = [enqueue("'g', p_queue => 'groups-told', p_group => 'y'"), enqueue("'g', p_queue => 'groups-told', p_group => 'z'")];
        assert_eq!(
            one::<String>(
                "SELECT string_agg(group_key, ',' ORDER BY task_id) FROM distlock.consume_tasks(5, 'w2', p_queues => ARRAY['groups-told'])"
            ),
            Some("y,z".into()),
            "a batch"
        );
        run("SELECT distlock.set_queue_limit('groups-limited', 3)");
        let limited = enqueue("'g', p_queue => 'groups-limited', p_group => 'l'");
        assert_eq!(
            one::<String>(
                "SELECT task_id || ':' || group_key FROM distlock.consume_task('w3', '1 millisecond', p_queues => ARRAY['groups-limited'])"
            ),
            Some(format!("{limited}:l")),
            "a limited queue"
        );
        run("SELECT pg_sleep(0.01)");
        assert_eq!(
            one::<String>(
                "SELECT task_id || ':' || group_key FROM distlock.consume_task('w4', p_queues => ARRAY['groups-limited'])"
            ),
            Some(format!("{limited}:l")),
            "taken over from an expired lease"
        );
        let next = enqueue("'g', p_queue => 'groups-told', p_group => 'n'");
        assert_eq!(
            one::<String>(&format!(
                "SELECT string_agg(task_id || ':' || outcome || ':' || coalesce(group_key, '-'), ',' ORDER BY outcome) \
                 FROM distlock.settle_and_consume_tasks(1, 'w2', p_completed => ARRAY[{}, {plain}], p_queues => ARRAY['groups-told'])",
                batch[0]
            )),
            Some(format!("{next}:claimed:n,{plain}:refused:-")),
            "settle_and_consume_tasks: claimed rows carry it, refused ones not"
        );
    }

    /// A group is a name in producers' scopes: a tenant cannot put a job in
    /// another tenant's group (where it would count against that group's
    /// limit or hold its order), by either function.
    #[pg_test]
    fn groups_a_producer_uses_groups_of_its_scope_only() {
        run("CREATE ROLE group_producer; SELECT distlock.grant_capability('group_producer', 'producer', 'a.'); \
             SET LOCAL ROLE group_producer");
        assert_sqlstate("distlock.enqueue_task('a.job', p_queue => 'a.q', p_group => 'b.g')", "42501");
        assert_sqlstate("distlock.enqueue_tasks('a.job', ARRAY['{}']::jsonb[], p_queue => 'a.q', p_group => 'b.g')", "42501");
        let id = enqueue("'a.job', p_queue => 'a.q', p_group => 'a.g'");
        let ids = one::<i64>(
            "SELECT count(*) FROM distlock.enqueue_tasks('a.job', ARRAY['{}', '{}']::jsonb[], p_queue => 'a.q', p_group => 'a.g')",
        );
        run("RESET ROLE");
        assert_eq!(ids, Some(2));
        assert_eq!(group_of(id), Some("a.g".into()));
        assert_eq!(one::<i64>("SELECT count(*) FROM distlock.jobs WHERE group_key = 'b.g'"), Some(0));
    }
}
