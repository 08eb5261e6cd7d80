//! Snowflake tests in this backend's mode (table mode under `cargo pgrx
//! test`); tests/cluster covers memory mode, many connections and restarts.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_sql::{one};

    #[pg_test]
    fn snowflake_ids_are_unique_and_increasing_in_one_statement() {
        let ok = one::<bool>(
            "WITH ids AS (SELECT g, distlock.generate_snowflake_id(7) AS id FROM generate_series(1, 200000) g), \
                  ordered AS (SELECT id, lag(id) OVER (ORDER BY g) AS prev FROM ids) \
             SELECT count(DISTINCT id) = 200000 AND bool_and(prev IS NULL OR id > prev) FROM ordered",
        );
        assert_eq!(ok, Some(true));
    }

    #[pg_test]
    fn snowflake_decoders_return_the_parts() {
        let id = one::<i64>("SELECT distlock.generate_snowflake_id(513)").expect("id");
        assert_eq!(one::<i32>(&format!("SELECT distlock.snowflake_worker_id({id})")), Some(513));
        let seq = one::<i32>(&format!("SELECT distlock.snowflake_sequence({id})")).expect("seq");
        assert!((0..4096).contains(&seq));
        assert_eq!(
            one::<bool>(&format!(
                "SELECT distlock.snowflake_timestamp({id}) BETWEEN clock_timestamp() - interval '5 seconds' \
                 AND clock_timestamp() + interval '1 second'"
            )),
            Some(true)
        );
        // The layout: 41 bits of ms since 2021-01-01, 10 of worker, 12 of sequence.
        assert_eq!(
            one::<String>(
                "SELECT distlock.snowflake_timestamp((1000::bigint << 22) | (3 << 12) | 5) AT TIME ZONE 'UTC' || ''"
            ),
            Some("2021-01-01 00:00:01".into())
        );
        assert_eq!(one::<i32>("SELECT distlock.snowflake_worker_id((1000::bigint << 22) | (3 << 12) | 5)"), Some(3));
        assert_eq!(one::<i32>("SELECT distlock.snowflake_sequence((1000::bigint << 22) | (3 << 12) | 5)"), Some(5));
    }

    #[pg_test]
    fn snowflake_resumes_above_the_persisted_mark() {
        // As after a restart with the clock set back 300 ms: wait, then go on above the mark.
        let mark = one::<i64>(
            "INSERT INTO distlock.id_generator (worker_id, last_ms) \
             VALUES (9, (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 300) RETURNING last_ms",
        )
        .expect("mark");
        let id = one::<i64>("SELECT distlock.generate_snowflake_id(9)").expect("id");
        assert!((id >> 22) + 1_609_459_200_000 > mark, "the first ID is above the mark");
    }

    #[pg_test(error = "distlock.id_generator.last_ms of worker id 11 is 9223372036854775807, outside 0..3808482455551 (the 41-bit range of distlock.snowflake_epoch)")]
    fn snowflake_a_mark_beyond_the_layout_is_an_error_not_an_overflow() {
        Spi::run("INSERT INTO distlock.id_generator (worker_id, last_ms) VALUES (11, 9223372036854775807)").expect("mark");
        Spi::run("SELECT distlock.generate_snowflake_id(11)").expect("refused");
    }

    #[pg_test(error = "clock moved backwards")]
    fn snowflake_clock_far_behind_the_mark_is_an_error() {
        Spi::run(
            "SET LOCAL distlock.snowflake_max_clock_backward = 50; \
             INSERT INTO distlock.id_generator (worker_id, last_ms) \
             VALUES (10, (extract(epoch FROM clock_timestamp()) * 1000)::bigint + 60000)",
        )
        .expect("mark");
        // Only the start of the message is fixed; match it through a DO block.
        Spi::run(
            "DO $$ BEGIN PERFORM distlock.generate_snowflake_id(10); \
             EXCEPTION WHEN object_not_in_prerequisite_state THEN \
               IF SQLERRM LIKE 'clock moved backwards: snowflake worker id 10 %' THEN RAISE EXCEPTION 'clock moved backwards'; END IF; \
             END $$",
        )
        .expect("generate");
    }

    #[pg_test(error = "p_worker_id must be between 0 and 1023, got 1024")]
    fn snowflake_worker_id_too_big() {
        one::<i64>("SELECT distlock.generate_snowflake_id(1024)");
    }

    #[pg_test(error = "p_worker_id must be between 0 and 1023, got -1")]
    fn snowflake_worker_id_negative() {
        one::<i64>("SELECT distlock.generate_snowflake_id(-1)");
    }

    #[pg_test(error = "p_worker_id must not be NULL")]
    fn snowflake_worker_id_null() {
        one::<i64>("SELECT distlock.generate_snowflake_id(NULL)");
    }

    #[pg_test(error = "p_id must not be NULL")]
    fn snowflake_decoder_null() {
        one::<i32>("SELECT distlock.snowflake_worker_id(NULL)");
    }

    #[pg_test(error = "p_id is not a snowflake ID (negative): -5")]
    fn snowflake_decoder_negative() {
        one::<i32>("SELECT distlock.snowflake_sequence(-5)");
    }
}
