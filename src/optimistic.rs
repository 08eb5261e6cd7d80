//! Optimistic locking: `distlock.bump_version()`, a BEFORE UPDATE row
//! trigger that increments an integer version column on every update and
//! refuses an update that carries a stale version (SQLSTATE 40001).
//!
//!   CREATE TRIGGER accounts_version BEFORE UPDATE ON accounts
//!       FOR EACH ROW EXECUTE FUNCTION distlock.bump_version();   -- or ('rev')
//!   UPDATE accounts SET balance = 90, version = 3 WHERE id = 42;  -- 3 = version read

use std::ffi::CStr;
use std::num::NonZeroUsize;

use pgrx::heap_tuple::PgHeapTuple;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::{AllocatedByRust, PgSqlErrorCode};

use crate::errors::{raise, raise_with_hint, OrRaise};

const DEFAULT_COLUMN: &str = "version";

#[derive(Clone, Copy)]
enum IntWidth {
    Int2,
    Int4,
    Int8,
}

fn get_version(tuple: &PgHeapTuple<'_, impl pgrx::WhoAllocated>, column: &str, width: IntWidth) -> Option<i64> {
    let value = match width {
        IntWidth::Int2 => tuple.get_by_name::<i16>(column).map(|v| v.map(i64::from)),
        IntWidth::Int4 => tuple.get_by_name::<i32>(column).map(|v| v.map(i64::from)),
        IntWidth::Int8 => tuple.get_by_name::<i64>(column),
    };
    value.or_raise()
}

/// Raised rather than wrapping: a version that went back to a smaller
/// number would let an update carrying an old version through again.
fn version_overflow(column: &str, current: i64) -> ! {
    raise(
        PgSqlErrorCode::ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE,
        format!("version column \"{column}\" cannot go past {current}"),
    )
}

fn set_version(tuple: &mut PgHeapTuple<'_, AllocatedByRust>, column: &str, width: IntWidth, value: i64) {
    let result = match width {
        IntWidth::Int2 => tuple.set_by_name(column, i16::try_from(value).unwrap_or_else(|_| version_overflow(column, value - 1))),
        IntWidth::Int4 => tuple.set_by_name(column, i32::try_from(value).unwrap_or_else(|_| version_overflow(column, value - 1))),
        IntWidth::Int8 => tuple.set_by_name(column, value),
    };
    result.or_raise();
}

/// Whether the current user may see these columns' values, by PostgreSQL's
/// own rule for key values in error messages (BuildIndexValueDescription):
/// not under row-level security, and SELECT on the table or on every column.
unsafe fn may_see_values(relation: pg_sys::Relation, attnums: &[pg_sys::AttrNumber]) -> bool {
    unsafe {
        let relid = (*relation).rd_id;
        let user = pg_sys::GetUserId();
        if pg_sys::check_enable_rls(relid, pg_sys::InvalidOid, true) == pg_sys::CheckEnableRlsResult::RLS_ENABLED as i32 {
            return false;
        }
        if pg_sys::pg_class_aclcheck(relid, user, pg_sys::ACL_SELECT as pg_sys::AclMode) == pg_sys::AclResult::ACLCHECK_OK {
            return true;
        }
        attnums.iter().all(|&attnum| {
            pg_sys::pg_attribute_aclcheck(relid, attnum, user, pg_sys::ACL_SELECT as pg_sys::AclMode)
                == pg_sys::AclResult::ACLCHECK_OK
        })
    }
}

/// Whether the current user may see the row's version: the same rule as
/// for key values, so that row-level security hides it too.
fn may_see_version(trigger: &PgTrigger<'_>, column: &str) -> bool {
    unsafe {
        let relation = trigger.trigger_data().tg_relation;
        let Ok(name) = std::ffi::CString::new(column) else { return false };
        let attnum = pg_sys::get_attnum((*relation).rd_id, name.as_ptr());
        attnum > 0 && may_see_values(relation, &[attnum])
    }
}

/// " (id)=(42)" for the old row, from the table's primary key (or its
/// ctid); empty when the user may not see the key's values.
fn describe_key(trigger: &PgTrigger<'_>) -> String {
    unsafe {
        let data = trigger.trigger_data();
        let relation = data.tg_relation;
        let tuple = data.tg_trigtuple;
        let tupdesc = (*relation).rd_att;
        let pk_index = crate::pg_compat::primary_key_index(relation);
        if pk_index == pg_sys::InvalidOid {
            let ctid = (*tuple).t_self;
            return format!(
                " (ctid)=(({},{}))",
                pgrx::itemptr::item_pointer_get_block_number(&ctid),
                pgrx::itemptr::item_pointer_get_offset_number(&ctid)
            );
        }
        let index = pg_sys::index_open(pk_index, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        let key_count = (*(*index).rd_index).indnkeyatts as usize;
        let attnums = (*(*index).rd_index).indkey.values.as_slice(key_count);
        if !may_see_values(relation, attnums) {
            pg_sys::index_close(index, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
            return String::new();
        }
        // The wrapper knows where each version keeps the attributes.
        let attributes = pgrx::PgTupleDesc::from_pg_unchecked(tupdesc);
        let mut names = Vec::with_capacity(key_count);
        let mut values = Vec::with_capacity(key_count);
        for &attnum in attnums {
            let Some(position) = NonZeroUsize::new(attnum as usize) else { continue };
            let Some(attr) = attributes.get(position.get() - 1) else { continue };
            names.push(attr.name().to_string());
            values.push(match pgrx::htup::heap_getattr_raw(tuple, position, tupdesc) {
                None => "null".to_string(),
                Some(datum) => {
                    let mut output = pg_sys::InvalidOid;
                    let mut varlena = false;
                    pg_sys::getTypeOutputInfo(attr.atttypid, &mut output, &mut varlena);
                    let text = pg_sys::OidOutputFunctionCall(output, datum);
                    CStr::from_ptr(text).to_string_lossy().into_owned()
                }
            });
        }
        pg_sys::index_close(index, pg_sys::AccessShareLock as pg_sys::LOCKMODE);
        format!(" ({})=({})", names.join(", "), values.join(", "))
    }
}

#[pg_trigger]
fn bump_version<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByRust>>, pgrx::PgTriggerError> {
    let table = format!("{}.{}", trigger.table_schema()?, trigger.table_name()?);
    let is_before_update_row = matches!(trigger.op()?, pgrx::PgTriggerOperation::Update)
        && matches!(trigger.when()?, pgrx::PgTriggerWhen::Before)
        && matches!(trigger.level(), pgrx::PgTriggerLevel::Row);
    if !is_before_update_row {
        raise(
            PgSqlErrorCode::ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED,
            format!("distlock.bump_version() on {table} must be a BEFORE UPDATE ... FOR EACH ROW trigger"),
        );
    }
    let args = trigger.extra_args()?;
    let column = args.first().map_or(DEFAULT_COLUMN, String::as_str);
    let (Some(old), Some(new)) = (trigger.old(), trigger.new()) else {
        raise(PgSqlErrorCode::ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED, "bump_version got no row");
    };
    let width = match new.get_attribute_by_name(column).map(|(_, attr)| attr.atttypid) {
        Some(pg_sys::INT2OID) => IntWidth::Int2,
        Some(pg_sys::INT4OID) => IntWidth::Int4,
        Some(pg_sys::INT8OID) => IntWidth::Int8,
        Some(_) => raise(
            PgSqlErrorCode::ERRCODE_DATATYPE_MISMATCH,
            format!("version column \"{column}\" of {table} must be smallint, integer or bigint"),
        ),
        None => raise(
            PgSqlErrorCode::ERRCODE_UNDEFINED_COLUMN,
            format!("table {table} has no version column \"{column}\""),
        ),
    };
    let current = get_version(&old, column, width).unwrap_or(0);
    let given = get_version(&new, column, width).unwrap_or(0);
    if given != current {
        let now_at = if may_see_version(trigger, column) {
            format!("the row is at version {current}")
        } else {
            "the row has changed since".to_string()
        };
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
            format!("stale update of {table}{}: version {given} was read, but {now_at}", describe_key(trigger)),
            "Re-read the row and apply the change again.",
        );
    }
    let next = current.checked_add(1).unwrap_or_else(|| version_overflow(column, current));
    let mut updated = new.into_owned();
    set_version(&mut updated, column, width, next);
    Ok(Some(updated))
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    fn setup(column: &str) {
        Spi::run(&format!(
            "CREATE TABLE accounts (id int PRIMARY KEY, balance int, {column} int NOT NULL DEFAULT 1); \
             INSERT INTO accounts VALUES (42, 100, 1); \
             CREATE TRIGGER accounts_version BEFORE UPDATE ON accounts \
                 FOR EACH ROW EXECUTE FUNCTION distlock.bump_version('{column}');"
        ))
        .expect("setup");
    }

    #[pg_test]
    fn optimistic_every_update_increments_the_version() {
        setup("version");
        Spi::run("UPDATE accounts SET balance = 90 WHERE id = 42").expect("update without version");
        Spi::run("UPDATE accounts SET balance = 80, version = 2 WHERE id = 42").expect("update with current version");
        assert_eq!(Spi::get_one::<i32>("SELECT version FROM accounts").expect("v"), Some(3));
    }

    #[pg_test(error = "stale update of public.accounts (id)=(42): version 1 was read, but the row is at version 2")]
    fn optimistic_a_stale_version_is_refused() {
        setup("version");
        Spi::run("UPDATE accounts SET balance = 90, version = 1 WHERE id = 42").expect("first writer");
        Spi::run("UPDATE accounts SET balance = 70, version = 1 WHERE id = 42").expect("second writer");
    }

    #[pg_test(error = "stale update of public.accounts: version 1 was read, but the row is at version 2")]
    fn optimistic_key_values_are_not_shown_to_a_role_that_cannot_read_them() {
        setup("version");
        Spi::run(
            "UPDATE accounts SET balance = 90 WHERE id = 42; \
             CREATE ROLE blind_writer; \
             GRANT UPDATE ON accounts TO blind_writer; \
             GRANT SELECT (version) ON accounts TO blind_writer; \
             SET LOCAL ROLE blind_writer",
        )
        .expect("setup");
        Spi::run("UPDATE accounts SET version = 1 WHERE version = 2").expect("stale");
    }

    #[pg_test(error = "version column \"version\" cannot go past 9223372036854775807")]
    fn optimistic_a_bigint_version_at_its_largest_value_does_not_wrap() {
        Spi::run(
            "CREATE TABLE ledger (id int PRIMARY KEY, version bigint NOT NULL); \
             INSERT INTO ledger VALUES (1, 9223372036854775807); \
             CREATE TRIGGER ledger_version BEFORE UPDATE ON ledger \
                 FOR EACH ROW EXECUTE FUNCTION distlock.bump_version();",
        )
        .expect("setup");
        Spi::run("UPDATE ledger SET id = 1").expect("update at the largest version");
    }

    #[pg_test(error = "stale update of public.accounts: version 1 was read, but the row has changed since")]
    fn optimistic_row_level_security_hides_the_current_version() {
        setup("version");
        Spi::run(
            "UPDATE accounts SET balance = 90 WHERE id = 42; \
             ALTER TABLE accounts ENABLE ROW LEVEL SECURITY; \
             CREATE POLICY everything ON accounts USING (true); \
             CREATE ROLE rls_writer; \
             GRANT SELECT, UPDATE ON accounts TO rls_writer; \
             SET LOCAL ROLE rls_writer",
        )
        .expect("setup");
        Spi::run("UPDATE accounts SET version = 1 WHERE id = 42").expect("stale");
    }

    #[pg_test]
    fn optimistic_stale_update_has_sqlstate_40001_and_custom_column() {
        setup("rev");
        Spi::run("UPDATE accounts SET rev = 1 WHERE id = 42").expect("rev 1 -> 2");
        Spi::run(
            "DO $$ BEGIN UPDATE accounts SET rev = 1 WHERE id = 42; RAISE EXCEPTION 'accepted'; \
             EXCEPTION WHEN serialization_failure THEN NULL; END $$",
        )
        .expect("stale rev raises 40001");
        assert_eq!(Spi::get_one::<i32>("SELECT rev FROM accounts").expect("rev"), Some(2));
    }

    #[pg_test(error = "table public.accounts has no version column \"nope\"")]
    fn optimistic_missing_column_is_reported() {
        setup("version");
        Spi::run(
            "CREATE TRIGGER bad BEFORE UPDATE ON accounts FOR EACH ROW EXECUTE FUNCTION distlock.bump_version('nope'); \
             UPDATE accounts SET balance = 1",
        )
        .expect("update");
    }
}
