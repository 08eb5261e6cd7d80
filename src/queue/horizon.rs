//! A consumer waiting in the server would hold its statement's snapshot,
//! and with it the database's xmin horizon, for the whole wait: while any
//! consumer slept, vacuum and index cleanup kept every row version that
//! died since it began, and each claim stepped over more of them. Every
//! statement the wait runs after waking takes a snapshot of its own, so when
//! nothing will read with the statement's snapshot again, the sleep stops
//! advertising an xmin, as a backend between two statements does. When that
//! cannot be shown (a transaction block, an open cursor, a query that reads
//! more than the call), the wait keeps it.

use pgrx::pg_sys::{self, NodeTag};
use std::cell::RefCell;
use std::ffi::{c_void, CStr};

/// The functions that wait, all of pg_distlock: each runs only statements
/// of its own, with fresh snapshots, after a sleep.
const WAITING_FUNCTIONS: [&CStr; 3] = [c"consume_task", c"consume_tasks", c"settle_and_consume_tasks"];

/// Whether no snapshot this transaction holds will be read with after the
/// calling wait returns: the wait is the whole of a plain SELECT that the
/// client runs on its own in READ COMMITTED, outside a transaction block,
/// and no other portal (a cursor, a suspended protocol-level portal) is
/// open.
pub fn statement_snapshot_unused_after_wait() -> bool {
    unsafe {
        pg_sys::XactIsoLevel < pg_sys::XACT_REPEATABLE_READ as i32
            && !pg_sys::IsTransactionBlock()
            && pg_sys::ThereAreNoReadyPortals()
            && runs_only_a_wait(pg_sys::ActivePortal)
    }
}

/// Stops advertising an xmin until the next statement takes a snapshot;
/// only when `statement_snapshot_unused_after_wait()`.
pub unsafe fn release_xmin() {
    unsafe {
        pg_sys::InvalidateCatalogSnapshot();
        (*pg_sys::MyProc).xmin = pg_sys::InvalidTransactionId;
        pg_sys::TransactionXmin = pg_sys::InvalidTransactionId;
    }
}

unsafe fn runs_only_a_wait(portal: pg_sys::Portal) -> bool {
    unsafe {
        if portal.is_null()
            || (*portal).strategy != pg_sys::PortalStrategy::PORTAL_ONE_SELECT
            || (*portal).queryDesc.is_null()
            || (*(*portal).queryDesc).plannedstmt.is_null()
            || !sends_to_the_client((*(*portal).queryDesc).dest)
        {
            return false;
        }
        let statement = &*(*(*portal).queryDesc).plannedstmt;
        statement.commandType == pg_sys::CmdType::CMD_SELECT
            && !statement.hasModifyingCTE
            && statement.subplans.is_null()
            && statement.rowMarks.is_null()
            && list_length(statement.rtable) == 1
            && plan_runs_only_a_wait(statement.planTree)
    }
}

/// The portal's rows go to the client: it is the client's statement, not
/// a cursor a function reads (a PL/pgSQL loop's rows go to SPI), which
/// would go on running with its own snapshot after the wait.
unsafe fn sends_to_the_client(destination: *mut pg_sys::DestReceiver) -> bool {
    !destination.is_null()
        && matches!(
            unsafe { (*destination).mydest },
            pg_sys::CommandDest::DestRemote | pg_sys::CommandDest::DestRemoteExecute
        )
}

/// The plan computes immutable expressions over the rows of a single call
/// of a waiting function: a function scan, under aggregation, sorting,
/// limits and projections only.
unsafe fn plan_runs_only_a_wait(plan: *mut pg_sys::Plan) -> bool {
    unsafe {
        if plan.is_null() {
            return false;
        }
        let node = &*plan;
        if !node.initPlan.is_null() || !node.righttree.is_null() || !immutable(node.targetlist) || !immutable(node.qual) {
            return false;
        }
        let below = node.lefttree;
        match (*plan.cast::<pg_sys::Node>()).type_ {
            NodeTag::T_FunctionScan => below.is_null() && calls_one_wait((*plan.cast::<pg_sys::FunctionScan>()).functions),
            NodeTag::T_Result => immutable((*plan.cast::<pg_sys::Result>()).resconstantqual) && plan_runs_only_a_wait(below),
            NodeTag::T_Agg => (*plan.cast::<pg_sys::Agg>()).chain.is_null() && plan_runs_only_a_wait(below),
            NodeTag::T_Sort => plan_runs_only_a_wait(below),
            NodeTag::T_Limit => {
                let limit = &*plan.cast::<pg_sys::Limit>();
                immutable(limit.limitOffset) && immutable(limit.limitCount) && plan_runs_only_a_wait(below)
            }
            _ => false,
        }
    }
}

/// `functions` (a function scan's) is one call of a waiting function of
/// pg_distlock, with immutable arguments.
unsafe fn calls_one_wait(functions: *mut pg_sys::List) -> bool {
    unsafe {
        if list_length(functions) != 1 {
            return false;
        }
        let function = pg_sys::list_nth(functions, 0).cast::<pg_sys::RangeTblFunction>();
        let call = (*function).funcexpr;
        if call.is_null() || (*call).type_ != NodeTag::T_FuncExpr {
            return false;
        }
        let call = &*call.cast::<pg_sys::FuncExpr>();
        immutable(call.args) && is_waiting_function(call.funcid)
    }
}

thread_local! {
    /// Functions this backend has looked up: an answer costs catalog scans
    /// (pg_extension, pg_depend), and a backend calls the same few.
    static LOOKED_UP: RefCell<Vec<(pg_sys::Oid, bool)>> = const { RefCell::new(Vec::new()) };
}

fn is_waiting_function(function: pg_sys::Oid) -> bool {
    if let Some(known) = LOOKED_UP.with(|seen| seen.borrow().iter().find(|(oid, _)| *oid == function).map(|(_, w)| *w)) {
        return known;
    }
    let waiting = unsafe {
        let extension = pg_sys::get_extension_oid(c"pg_distlock".as_ptr(), true);
        let name = pg_sys::get_func_name(function);
        extension != pg_sys::InvalidOid
            && !name.is_null()
            && WAITING_FUNCTIONS.contains(&CStr::from_ptr(name))
            && pg_sys::getExtensionOfObject(pg_sys::ProcedureRelationId, function) == extension
    };
    LOOKED_UP.with(|seen| seen.borrow_mut().push((function, waiting)));
    waiting
}

/// No function in `expression` may read the database: every function is
/// immutable and every aggregate built in (an aggregate's own volatility
/// says nothing of its support functions).
unsafe fn immutable<T>(expression: *mut T) -> bool {
    let expression = expression.cast::<pg_sys::Node>();
    unsafe {
        expression.is_null()
            || (!pg_sys::contain_mutable_functions(expression)
                && !names_user_aggregate(expression, std::ptr::null_mut()))
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn names_user_aggregate(node: *mut pg_sys::Node, context: *mut c_void) -> bool {
    unsafe {
        if node.is_null() {
            return false;
        }
        if (*node).type_ == NodeTag::T_Aggref
            && (*node.cast::<pg_sys::Aggref>()).aggfnoid.to_u32() >= pg_sys::FirstNormalObjectId
        {
            return true;
        }
        pg_sys::expression_tree_walker(node, Some(names_user_aggregate), context)
    }
}

unsafe fn list_length(list: *mut pg_sys::List) -> i32 {
    if list.is_null() { 0 } else { unsafe { (*list).length } }
}
