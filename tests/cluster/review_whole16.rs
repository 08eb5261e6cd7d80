//! Whole-diff review 16 (ce78f07..b0c2848), as a fresh-eyes review attacked
//! job groups and dedup windows: each test fails at b0c2848.

use crate::support::*;

/// `p_unique_for` is "at most 100 years" (docs/queue.md, and the error's own
/// words), yet a window written in years, the way anyone writes a century,
/// is refused: unique_window counts every month as 31 days, so '100 years'
/// (1200 months) is 37,200 days against a limit of 36,500, and the caller
/// reads "p_unique_for must be at most 100 years, got 100 years". Anything
/// from '99 years' (1188 months) up is refused the same way, while the
/// Python client's own limit, timedelta(days=36500), passes. Expected:
/// '100 years' and '1200 months' accepted (PostgreSQL's interval arithmetic
/// counts a month as 30 days: '100 years' = 36,000 days); '101 years'
/// refused.
#[test]
fn review_whole16_a_window_of_100_years_is_within_at_most_100_years() {
    let db = fresh_db("review_whole16_century");
    let mut c = connect(&db);
    for (key, window) in [("a", "100 years"), ("b", "99 years"), ("c", "1200 months"), ("d", "36500 days")] {
        let called = c.query_one(
            &format!(
                "SELECT distlock.enqueue_task('sync', p_queue => 'century', p_unique_key => '{key}', \
                        p_unique_for => '{window}')"
            ),
            &[],
        );
        if let Err(e) = called {
            panic!("p_unique_for => '{window}' refused: {}", described(e));
        }
    }
    assert_eq!(
        sqlstate(c.query_one(
            "SELECT distlock.enqueue_task('sync', p_queue => 'century', p_unique_key => 'e', p_unique_for => '101 years')",
            &[],
        )),
        "22023"
    );
}
