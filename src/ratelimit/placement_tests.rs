//! The partition's probing rules, on a partition of plain memory.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::ratelimit::placement::{find, free, place, reclaim, shorten_probes, Refusal};
    use crate::shared::rate_table::{PartitionState, RateEntry};

    const SLOTS: usize = 128;
    const NOW: i64 = 1_000;
    /// A database may fill the whole partition.
    const NO_SHARE: u32 = u32::MAX;

    /// A hash whose home slot is `home` (bytes 8..16) and that differs by `n`.
    fn hash(home: u64, n: u32) -> [u8; 16] {
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&n.to_le_bytes());
        h[8..16].copy_from_slice(&home.to_le_bytes());
        h
    }

    fn live(entries: &mut [RateEntry], i: usize) {
        entries[i].expires_at_us = NOW + 1_000_000;
    }

    #[pg_test]
    fn placement_a_key_whose_home_is_crowded_goes_past_64_slots() {
        let mut state = PartitionState::default();
        let mut entries = vec![RateEntry::default(); SLOTS];
        // 127 keys of one home: 0.3.0 gave up after 64 slots.
        for n in 0..127 {
            let i = place(&mut state, &mut entries, &hash(5, n), 1, NOW, NO_SHARE).expect("room");
            live(&mut entries, i);
        }
        let last = place(&mut state, &mut entries, &hash(5, 999), 1, NOW, NO_SHARE).expect("the last slot");
        live(&mut entries, last);
        assert_eq!(last, 4, "wrapped round to the slot before its home");
        assert_eq!(state.in_use, 128);
        assert_eq!(place(&mut state, &mut entries, &hash(5, 1000), 1, NOW, NO_SHARE), Err(Refusal::Full));
        for n in (0..127).chain([999]) {
            assert!(find(&state, &entries, &hash(5, n)).is_some(), "key {n} is found");
        }
    }

    #[pg_test]
    fn placement_freeing_in_the_middle_loses_no_key_behind_it() {
        let mut state = PartitionState::default();
        let mut entries = vec![RateEntry::default(); SLOTS];
        for n in 0..10 {
            let i = place(&mut state, &mut entries, &hash(7, n), 1, NOW, NO_SHARE).expect("room");
            live(&mut entries, i);
        }
        let middle = find(&state, &entries, &hash(7, 4)).expect("placed");
        free(&mut state, &mut entries, middle);
        let expired = find(&state, &entries, &hash(7, 5)).expect("placed");
        entries[expired].expires_at_us = NOW - 1;
        assert_eq!(reclaim(&mut state, &mut entries, NOW, 1), 8);
        for n in [0, 1, 2, 3, 6, 7, 8, 9] {
            assert!(find(&state, &entries, &hash(7, n)).is_some(), "key {n} is still found");
        }
        assert!(find(&state, &entries, &hash(7, 5)).is_none(), "the expired key was freed");
        // The freed slots are taken again first.
        let i = place(&mut state, &mut entries, &hash(7, 50), 1, NOW, NO_SHARE).expect("room");
        assert_eq!(i, middle);
    }

    #[pg_test]
    fn placement_a_database_is_refused_beyond_its_share_and_others_are_not() {
        let mut state = PartitionState::default();
        let mut entries = vec![RateEntry::default(); SLOTS];
        let share = 16;
        for n in 0..16 {
            let i = place(&mut state, &mut entries, &hash(n as u64 * 3, n), 1, NOW, share).expect("within share");
            live(&mut entries, i);
        }
        assert_eq!(place(&mut state, &mut entries, &hash(1, 100), 1, NOW, share), Err(Refusal::Share));
        // Another database, counted without a counter of its own too.
        for database in 2..20 {
            let i = place(&mut state, &mut entries, &hash(9, 1000 + database), database, NOW, share).expect("room");
            live(&mut entries, i);
        }
        // Once database 1's keys expire, it has room again.
        for e in entries.iter_mut().filter(|e| e.database == 1) {
            e.expires_at_us = NOW - 1;
        }
        assert!(place(&mut state, &mut entries, &hash(1, 100), 1, NOW, share).is_ok());
        let counted: u32 = state.databases.iter().map(|d| d.entries).sum();
        let untracked = entries.iter().filter(|e| e.in_use && !state.databases.iter().any(|d| d.entries > 0 && d.database == e.database)).count();
        assert_eq!(counted as usize + untracked, state.in_use as usize);
        assert_eq!(state.in_use as usize, entries.iter().filter(|e| e.in_use).count());
    }

    #[pg_test]
    fn placement_long_probes_left_by_expired_keys_are_shortened_once_a_second() {
        let mut state = PartitionState::default();
        let mut entries = vec![RateEntry::default(); SLOTS];
        for n in 0..100 {
            let i = place(&mut state, &mut entries, &hash(3, n), 1, NOW, NO_SHARE).expect("room");
            entries[i].expires_at_us = NOW + 10;
        }
        let survivor = place(&mut state, &mut entries, &hash(90, 7777), 1, NOW, NO_SHARE).expect("room");
        entries[survivor].expires_at_us = NOW + 10_000_000;
        assert_eq!(state.max_probe, 99, "the 100th key of home 3");
        let later = NOW + 2_000_000;
        shorten_probes(&mut state, &mut entries, later);
        assert!(state.max_probe < 20, "probes stay {} long", state.max_probe);
        assert_eq!(state.in_use, 1, "only the survivor is left");
        assert!(find(&state, &entries, &hash(90, 7777)).is_some());
        // Not again within the second.
        state.max_probe = 100;
        shorten_probes(&mut state, &mut entries, later + 500_000);
        assert_eq!(state.max_probe, 100, "not shortened again within the second");
    }
}
