//! The table-backed rate-limit path (pg_distlock not preloaded).

use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::text::Text;

use super::logic::{Gcra, Verdict, Window};
use super::to_timestamp;
use crate::errors::OrRaise;
use crate::plans::{first_value, plan, types};

pub fn admit(key: &Text, now_us: i64, length_us: i64, max_requests: i32) -> bool {
    crate::errors::require_primary("record rate-limit state");
    crate::access::connect_mut(|client| {
        let stmt = plan(
            client,
            include_str!("../../sql/queries/rl_window_admit.sql"),
            &[types::TEXT, types::TIMESTAMPTZ, types::INT8, types::INT4],
        );
        client
            .update(&*stmt, None, &[key.into(), to_timestamp(now_us).into(), length_us.into(), max_requests.into()])
            .map(|rows| !rows.is_empty())
            .or_raise()
    })
}

pub fn window(key: &Text, now_us: i64) -> Option<Window> {
    crate::access::connect(|client| {
        let stmt = plan(
            client,
            include_str!("../../sql/queries/rl_window_status.sql"),
            &[types::TEXT, types::TIMESTAMPTZ],
        );
        let rows = client.select(&*stmt, None, &[key.into(), to_timestamp(now_us).into()]).or_raise();
        if rows.is_empty() {
            return None;
        }
        let row = rows.first();
        let (count, max_requests) = row.get_two::<i32, i32>().or_raise();
        let start = row.get::<TimestampWithTimeZone>(3).or_raise()?;
        let end = row.get::<TimestampWithTimeZone>(4).or_raise()?;
        Some(Window {
            start_us: start.into_inner(),
            length_us: end.into_inner() - start.into_inner(),
            count: count.unwrap_or_default(),
            max_requests: max_requests.unwrap_or_default(),
        })
    })
}

fn locked_tat(client: &mut SpiClient<'_>, key: &Text, now_us: i64) -> i64 {
    let lock = plan(client, include_str!("../../sql/queries/rl_gcra_lock.sql"), &[types::TEXT, types::TIMESTAMPTZ]);
    client
        .update(&*lock, None, &[key.into(), to_timestamp(now_us).into()])
        .and_then(first_value::<TimestampWithTimeZone>)
        .or_raise()
        .map_or(now_us, |tat| tat.into_inner())
}

pub fn throttle(key: &Text, now_us: i64, gcra: &Gcra, quantity: i32) -> Verdict {
    crate::errors::require_primary("record rate-limit state");
    crate::access::connect_mut(|client| {
        let tat = locked_tat(client, key, now_us);
        let verdict = gcra.throttle(Some(tat), now_us, quantity);
        if let Some(new_tat) = verdict.new_tat_us.filter(|t| *t != tat) {
            let store = plan(client, include_str!("../../sql/queries/rl_gcra_store.sql"), &[types::TEXT, types::TIMESTAMPTZ]);
            client.update(&*store, None, &[key.into(), to_timestamp(new_tat).into()]).or_raise();
        }
        verdict
    })
}

pub fn reset(key: &Text, now_us: i64) -> bool {
    crate::access::connect_mut(|client| {
        let stmt = plan(client, include_str!("../../sql/queries/rl_reset.sql"), &[types::TEXT, types::TIMESTAMPTZ]);
        client
            .update(&*stmt, None, &[key.into(), to_timestamp(now_us).into()])
            .and_then(first_value::<bool>)
            .or_raise()
            .unwrap_or(false)
    })
}

/// Deletes expired table state (called by the sweep).
pub fn prune_expired(client: &SpiClient<'_>) {
    let stmt = plan(client, include_str!("../../sql/queries/rl_prune.sql"), &[]);
    client.select(&*stmt, None, &[]).or_raise();
}
