//! The owner-level wait-for graph: connections are grouped by their owner
//! (`distlock.owner`, else each backend is its own), and a wait closes a
//! deadlock when the holders of what it waits for lead, through waits of
//! their owners' connections, back to its own owner. The search runs in a
//! timeout handler (a suspicion, on the shared table) and again on the lock
//! manager's data (the proof), so it allocates nothing and its depth and
//! breadth are bounded.

/// How many owners a cycle may run through and still be found.
pub const MAX_HOPS: usize = 8;
/// Owners the search visits at most (it gives up beyond: no deadlock found).
const MAX_VISITED: usize = 64;

/// What one connection waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wait {
    pub database: u32,
    pub key: i64,
    pub exclusive: bool,
    /// The server-wide order of the wait (later waits have greater values):
    /// the victim is the cycle's waiter with the greatest.
    pub seq: u64,
    /// Its place in the lock's queue (earlier waits have smaller values).
    pub order: i64,
}

impl Wait {
    /// Whether `other`, a wait queued for the same lock, is ahead of this
    /// one in a conflicting mode (the lock manager serves its queue in order).
    pub fn queued_behind(&self, other: &Wait) -> bool {
        other.database == self.database
            && other.key == self.key
            && other.order < self.order
            && (other.exclusive || self.exclusive)
    }
}

/// The connections the search looks at, by index.
pub trait View {
    fn len(&self) -> usize;
    /// The connection's node: its owner, or itself when it has none.
    fn node(&self, conn: usize) -> u64;
    fn waiting(&self, conn: usize) -> Option<Wait>;
    /// Whether it stands in `wait`'s way: it holds the key in a mode the
    /// wait conflicts with, or waits for the key ahead of it in a
    /// conflicting mode (Wait::queued_behind).
    fn blocks(&self, conn: usize, wait: &Wait) -> bool;
}

/// A deadlock found from one waiter: each hop a waiting connection and the
/// holder of what it waits for, the last holder's owner the first waiter's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cycle {
    hops: [(usize, usize); MAX_HOPS],
    len: usize,
}

impl Cycle {
    pub fn hops(&self) -> &[(usize, usize)] {
        &self.hops[..self.len]
    }

    /// Whether every hop's holder is itself the next hop's waiter (and the
    /// last holder the first waiter): a cycle of backends, which the
    /// server's own deadlock detector finds and resolves.
    pub fn of_backends_only(&self) -> bool {
        let hops = self.hops();
        hops.iter()
            .enumerate()
            .all(|(i, &(_, holder))| holder == hops[(i + 1) % hops.len()].0)
    }
}

struct Search<'v, V: View> {
    view: &'v V,
    me: usize,
    mine: Wait,
    home: u64,
    visited: [u64; MAX_VISITED],
    visited_len: usize,
    path: Cycle,
}

impl<V: View> Search<'_, V> {
    fn seen(&mut self, node: u64) -> bool {
        if self.visited[..self.visited_len].contains(&node) {
            return true;
        }
        if self.visited_len == MAX_VISITED {
            return true; // too wide: stop rather than go on without a record
        }
        self.visited[self.visited_len] = node;
        self.visited_len += 1;
        false
    }

    /// From `waiter` (waiting for `wait`): true when a path leads home.
    fn from(&mut self, waiter: usize, wait: Wait) -> bool {
        if self.path.len == MAX_HOPS {
            return false;
        }
        for holder in 0..self.view.len() {
            if holder == waiter || !self.view.blocks(holder, &wait) {
                continue;
            }
            self.path.hops[self.path.len] = (waiter, holder);
            self.path.len += 1;
            let node = self.view.node(holder);
            if node == self.home {
                return true;
            }
            if !self.seen(node) {
                for next in 0..self.view.len() {
                    if next == self.me || self.view.node(next) != node {
                        continue;
                    }
                    // Only waits that began before this one: the waiter
                    // whose wait began last is the cycle's one victim.
                    let Some(theirs) = self.view.waiting(next) else {
                        continue;
                    };
                    if theirs.seq < self.mine.seq && self.from(next, theirs) {
                        return true;
                    }
                }
            }
            self.path.len -= 1;
        }
        false
    }
}

/// A deadlock that `me`'s wait closes and in which `me`'s wait began last
/// (so that exactly one waiter of a cycle finds it: its victim); None when
/// `me` does not wait or no such cycle is found.
pub fn cycle_closed_by<V: View>(view: &V, me: usize) -> Option<Cycle> {
    let mine = view.waiting(me)?;
    let home = view.node(me);
    let mut search = Search {
        view,
        me,
        mine,
        home,
        visited: [0; MAX_VISITED],
        visited_len: 0,
        path: Cycle {
            hops: [(0, 0); MAX_HOPS],
            len: 0,
        },
    };
    search.seen(home);
    search.from(me, mine).then_some(search.path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (node, wait: (key, exclusive, seq), holds: (key, exclusive))
    struct Conns(Vec<(u64, Option<(i64, bool, u64)>, Vec<(i64, bool)>)>);

    impl View for Conns {
        fn len(&self) -> usize {
            self.0.len()
        }
        fn node(&self, conn: usize) -> u64 {
            self.0[conn].0
        }
        fn waiting(&self, conn: usize) -> Option<Wait> {
            self.0[conn].1.map(|(key, exclusive, seq)| Wait {
                database: 1,
                key,
                exclusive,
                seq,
                order: seq as i64,
            })
        }
        fn blocks(&self, conn: usize, wait: &Wait) -> bool {
            let holds = wait.database == 1
                && self.0[conn]
                    .2
                    .iter()
                    .any(|&(k, x)| k == wait.key && (wait.exclusive || x));
            holds || self.waiting(conn).is_some_and(|theirs| wait.queued_behind(&theirs))
        }
    }

    /// P1 (conns 0, 1) holds A on 0 and waits for B on 1; P2 (2, 3) holds B
    /// on 2 and waits for A on 3: no backend waits for another that waits.
    fn inversion(seq1: u64, seq3: u64) -> Conns {
        Conns(vec![
            (1, None, vec![(10, true)]),
            (1, Some((20, true, seq1)), vec![]),
            (2, None, vec![(20, true)]),
            (2, Some((10, true, seq3)), vec![]),
        ])
    }

    #[test]
    fn a_two_owner_inversion_is_found_by_the_later_waiter_only() {
        let conns = inversion(1, 2);
        let cycle = cycle_closed_by(&conns, 3).expect("the later waiter finds it");
        assert_eq!(cycle.hops(), &[(3, 0), (1, 2)]);
        assert!(!cycle.of_backends_only());
        assert_eq!(
            cycle_closed_by(&conns, 1),
            None,
            "the earlier waiter is not the victim"
        );
        let conns = inversion(5, 2);
        assert!(cycle_closed_by(&conns, 1).is_some());
        assert_eq!(cycle_closed_by(&conns, 3), None);
    }

    #[test]
    fn a_three_owner_cycle_is_found_and_a_chain_is_not() {
        let mut conns = Conns(vec![
            (1, None, vec![(10, true)]),
            (1, Some((20, true, 1)), vec![]),
            (2, None, vec![(20, true)]),
            (2, Some((30, true, 2)), vec![]),
            (3, None, vec![(30, true)]),
            (3, Some((10, true, 3)), vec![]),
        ]);
        assert_eq!(cycle_closed_by(&conns, 5).map(|c| c.hops().len()), Some(3));
        assert_eq!(cycle_closed_by(&conns, 1), None);
        assert_eq!(cycle_closed_by(&conns, 3), None);
        conns.0[5].1 = Some((40, true, 3)); // waits for a free key: a chain
        assert_eq!(cycle_closed_by(&conns, 5), None);
    }

    #[test]
    fn shared_holds_block_only_exclusive_waits() {
        let mut conns = inversion(1, 2);
        conns.0[0].2 = vec![(10, false)];
        conns.0[3].1 = Some((10, false, 2));
        assert_eq!(
            cycle_closed_by(&conns, 3),
            None,
            "shared with shared: no conflict"
        );
        conns.0[3].1 = Some((10, true, 2));
        assert!(cycle_closed_by(&conns, 3).is_some());
    }

    /// Review: o1 holds A shared and waits for B; o2 holds B and asks A
    /// shared, queued behind c's exclusive request for A, which waits for
    /// o1's shared hold: a deadlock through the queue's order.
    #[test]
    fn a_cycle_through_a_queued_exclusive_waiter_is_found() {
        let conns = Conns(vec![
            (1, None, vec![(10, false)]),
            (1, Some((20, true, 2)), vec![]),
            (2, None, vec![(20, true)]),
            (3, Some((10, true, 1)), vec![]),
            (2, Some((10, false, 3)), vec![]),
        ]);
        let cycle = cycle_closed_by(&conns, 4).expect("the last waiter finds it");
        assert_eq!(cycle.hops(), &[(4, 3), (3, 0), (1, 2)]);
    }

    #[test]
    fn a_cycle_of_single_backends_is_left_to_the_server() {
        // Each backend its own owner, holding one key and waiting for the other.
        let conns = Conns(vec![
            (1, Some((20, true, 1)), vec![(10, true)]),
            (2, Some((10, true, 2)), vec![(20, true)]),
        ]);
        let cycle = cycle_closed_by(&conns, 1).expect("found");
        assert!(cycle.of_backends_only());
    }

    #[test]
    fn one_owner_waiting_for_itself_on_another_connection_is_a_deadlock() {
        // The same owner holds A on 0 and waits for A on 1.
        let conns = Conns(vec![
            (1, None, vec![(10, true)]),
            (1, Some((10, true, 1)), vec![]),
        ]);
        assert_eq!(
            cycle_closed_by(&conns, 1).map(|c| c.hops().to_vec()),
            Some(vec![(1, 0)])
        );
    }
}
