//! Looking at and clearing many rate-limit keys at once: what an operator
//! needs when keys pile up (or someone floods the table), since state in
//! shared memory is otherwise only reachable key by key.

use pgrx::prelude::*;

use super::memory::{self, Kind};
use super::{now_us, to_timestamp};
use crate::errors::OrRaise;
use crate::plans::{plan, types};
use crate::scopes::{self, Capability};
use crate::text::Text;

struct Row {
    kind: String,
    key: Text,
    complete: bool,
    request_count: Option<i32>,
    max_requests: Option<i32>,
    expires_at_us: i64,
}

fn in_memory(now: i64) -> Vec<Row> {
    let mut rows = Vec::new();
    memory::each_of_this_database(|e| {
        if e.expires_at_us > now {
            let window = e.kind == Kind::Window as u8;
            rows.push(Row {
                kind: Kind::name(e.kind).into(),
                key: Text::from(e.kept_key()),
                complete: e.key_complete(),
                request_count: window.then_some(e.count),
                max_requests: window.then_some(e.max_requests),
                expires_at_us: e.expires_at_us,
            });
        }
        false
    });
    rows
}

fn in_tables(now: i64) -> Vec<Row> {
    crate::access::connect(|client| {
        let stmt = plan(client, include_str!("../../sql/queries/rl_keys.sql"), &[types::TIMESTAMPTZ]);
        let rows = client.select(&*stmt, None, &[to_timestamp(now).into()]).or_raise();
        rows.map(|row| {
            Ok::<_, pgrx::spi::SpiError>(Row {
                kind: row.get::<String>(1)?.unwrap_or_default(),
                key: row.get::<Text>(2)?.unwrap_or_default(),
                complete: true,
                request_count: row.get::<i32>(3)?,
                max_requests: row.get::<i32>(4)?,
                expires_at_us: row.get::<TimestampWithTimeZone>(5)?.map_or(now, |t| t.into_inner()),
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .or_raise()
    })
}

/// The rate-limit keys of this database with live state, in the caller's
/// monitor scope. In memory mode a key longer than 64 bytes is shown cut
/// (`key_complete` false); `expires_at` is when its state ends (a fixed
/// window's end, GCRA's theoretical arrival time).
#[pg_extern(volatile, parallel_restricted)]
#[allow(clippy::type_complexity)]
fn rate_limit_keys() -> TableIterator<
    'static,
    (
        name!(kind, String),
        name!(key, Text),
        name!(key_complete, bool),
        name!(request_count, Option<i32>),
        name!(max_requests, Option<i32>),
        name!(expires_at, TimestampWithTimeZone),
    ),
> {
    let now = now_us();
    let scope = scopes::of_caller(Capability::Monitor);
    let mut rows = if crate::shared::available() { in_memory(now) } else { in_tables(now) };
    // A cut key is in a scope only when its kept bytes already start with
    // one of the scope's prefixes, which then the whole key does too.
    rows.retain(|r| scope.admits(r.key.bytes()));
    rows.sort_by(|a, b| a.key.bytes().cmp(b.key.bytes()).then_with(|| a.kind.cmp(&b.kind)));
    TableIterator::new(rows.into_iter().map(|r| {
        (r.kind, r.key, r.complete, r.request_count, r.max_requests, to_timestamp(r.expires_at_us))
    }))
}

/// Whether a key kept as `kept` (cut unless `complete`) starts with `prefix`:
/// a cut key shorter than the prefix is not known to, and is left alone.
fn starts_with(kept: &[u8], complete: bool, prefix: &[u8]) -> bool {
    kept.starts_with(prefix) && (complete || kept.len() >= prefix.len())
}

/// Forgets the rate-limit state (windows and GCRA) of every key of this
/// database that starts with `p_key_prefix` (every key when NULL); returns
/// how many had live state. In memory mode a key kept cut to fewer bytes
/// than the prefix is left alone: reset it with reset_rate_limit(key).
#[pg_extern(volatile, parallel_unsafe)]
fn reset_rate_limits(p_key_prefix: default!(Option<Text>, "NULL")) -> i64 {
    let now = now_us();
    if crate::shared::available() {
        let prefix = p_key_prefix.as_ref().map_or(&[][..], Text::bytes);
        let mut live = 0i64;
        memory::each_of_this_database(|e| {
            let matches = starts_with(e.kept_key(), e.key_complete(), prefix);
            live += i64::from(matches && e.expires_at_us > now);
            matches
        });
        live
    } else {
        crate::access::connect_mut(|client| {
            let stmt = plan(
                client,
                include_str!("../../sql/queries/rl_reset_prefix.sql"),
                &[types::TEXT, types::TIMESTAMPTZ],
            );
            client
                .update(&*stmt, None, &[p_key_prefix.into(), to_timestamp(now).into()])
                .and_then(crate::plans::first_value::<i64>)
                .or_raise()
                .unwrap_or(0)
        })
    }
}
