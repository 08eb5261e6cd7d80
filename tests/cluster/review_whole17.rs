//! Whole-diff review 17 (f4bc13a..this change): job groups handed to
//! consumers, the key-led dedup index, and the century cap.

use crate::support::*;

/// The 0.4.0 section of CHANGELOG.md, the notes an operator reads before
/// updating, still says (issue 47, item 6) that `consume_task`,
/// `consume_tasks` and `settle_and_consume_tasks` "return each job's
/// `queue` as their last column". This change appended `group_key` after
/// `queue` (its own entry a few lines up says so), so the two entries of the
/// same unreleased section contradict each other, and a reader who follows
/// the older one and reads the last column by position for the queue gets
/// the group (NULL for most jobs). Likewise the Python client's 0.4.0 notes
/// ("`Job.queue` ... read from the new last column"). Expected: no entry of
/// an unreleased section calls `queue` the last column.
#[test]
fn review_whole17_the_0_4_0_changelogs_do_not_call_queue_the_last_column() {
    let root = env!("CARGO_MANIFEST_DIR");
    for file in ["CHANGELOG.md", "clients/python/CHANGELOG.md"] {
        let text = std::fs::read_to_string(format!("{root}/{file}")).expect("read the changelog");
        // The section in development: from its heading to the next release's.
        let start = text.find("(in development)").expect("a section in development");
        let section = &text[start..];
        let section = &section[..section[1..].find("\n## ").map_or(section.len(), |end| end + 1)];
        let flat = section.split_whitespace().collect::<Vec<_>>().join(" ");
        for stale in ["`queue` as their last column", "from the new last column"] {
            assert!(!flat.contains(stale), "{file}: the 0.4.0 section still says {stale:?}, while group_key is now last");
        }
    }
}
