//! Leader election: a lease per group whose token is the leader's term.

use crate::scopes::{require, Capability};
use crate::text::{self, Text};
use pgrx::prelude::*;
use pgrx::spi::SpiTupleTable;

use super::{checked_bool, now, run, NAME_OWNER_NOW, NAME_OWNER_NOW_TTL_ROLE};
use crate::access::caller;
use crate::errors::require_primary;
use crate::plans::types;

type Leadership = (Option<i64>, Option<Text>, Option<TimestampWithTimeZone>);

fn read_leadership(rows: SpiTupleTable<'_>) -> pgrx::spi::SpiResult<Option<Leadership>> {
    if rows.is_empty() {
        return Ok(None);
    }
    let row = rows.first();
    Ok(Some((row.get::<i64>(1)?, row.get::<Text>(2)?, row.get::<TimestampWithTimeZone>(3)?)))
}

/// Campaigns for (or renews) leadership of `p_group` as `p_node` for
/// `p_ttl`. Returns whether `p_node` leads now, the current term (strictly
/// increasing with each new leader), the leader and when its lease ends.
#[pg_extern]
fn try_become_leader(
    p_group: Option<Text>,
    p_node: Option<Text>,
    p_ttl: Option<Interval>,
) -> TableIterator<
    'static,
    (
        name!(is_leader, bool),
        name!(term, Option<i64>),
        name!(leader, Option<Text>),
        name!(expires_at, Option<TimestampWithTimeZone>),
    ),
> {
    let group = text::name(p_group, "p_group");
    let node = text::name(p_node, "p_node");
    let ttl = super::hold_ttl(p_ttl);
    require_primary("elect leaders");
    require(Capability::Worker, "election group", &group);
    crate::lock_keys::lock_grants_until_commit(crate::lock_keys::TERM_GRANT_CLASS, group.bytes(), || {
        format!("the leadership of group \"{group}\"")
    });
    let at = now();
    let (is_leader, (term, leader, expires_at)) = crate::access::connect(|client| {
        let elected = run(
            client,
            include_str!("../../sql/queries/leader_campaign.sql"),
            &NAME_OWNER_NOW_TTL_ROLE,
            &[(&group).into(), (&node).into(), at.into(), ttl.into(), caller().into()],
            read_leadership,
        );
        match elected {
            Some(state) => (true, state),
            None => (
                false,
                run(
                    client,
                    include_str!("../../sql/queries/leader_current.sql"),
                    &[types::TEXT],
                    &[(&group).into()],
                    read_leadership,
                )
                .unwrap_or((None, None, None)),
            ),
        }
    });
    TableIterator::once((is_leader, term, leader, expires_at))
}

/// Steps `p_node` down as leader of `p_group`; true when it was the live leader.
#[pg_extern]
fn resign_leader(p_group: Option<Text>, p_node: Option<Text>) -> bool {
    let group = text::name(p_group, "p_group");
    let node = text::name(p_node, "p_node");
    require(Capability::Worker, "election group", &group);
    crate::access::connect(|client| {
        run(
            client,
            include_str!("../../sql/queries/leader_resign.sql"),
            &NAME_OWNER_NOW,
            &[(&group).into(), (&node).into(), now().into()],
            |rows| checked_bool(client, rows, || format!("the leadership of group \"{group}\"")),
        )
    })
}
