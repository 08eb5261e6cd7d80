//! Memory mode's persisted marks: one server-wide file in the data
//! directory, `pg_distlock/snowflake_marks`, 1024 little-endian int64s (one
//! per worker id, Unix milliseconds). Worker ids are shared by every
//! database of the server, so their marks are too; and a mark written to a
//! file is durable at once, outside any caller's transaction, so no caller
//! waits for another's commit and no rollback takes back a mark that other
//! backends have issued IDs under.

use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt;

use pgrx::PgSqlErrorCode;

use crate::errors::raise;

/// Relative to the data directory, every backend's working directory.
const DIRECTORY: &str = "pg_distlock";
const FILE: &str = "pg_distlock/snowflake_marks";

fn io_error(action: &str, e: std::io::Error) -> ! {
    raise(PgSqlErrorCode::ERRCODE_IO_ERROR, format!("could not {action} \"{FILE}\": {e}"))
}

fn offset(worker_id: i32) -> u64 {
    worker_id as u64 * 8
}

/// The persisted mark of `worker_id`, 0 when none was ever written.
pub fn read(worker_id: i32) -> i64 {
    let file = match File::open(FILE) {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => return 0,
        Err(e) => io_error("open", e),
    };
    let mut bytes = [0u8; 8];
    match file.read_exact_at(&mut bytes, offset(worker_id)) {
        Ok(()) => i64::from_le_bytes(bytes),
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => 0,
        Err(e) => io_error("read", e),
    }
}

/// Writes `mark` for `worker_id` and waits until it is on disk. Callers
/// serialize per worker id (see memory.rs), so the value only rises.
pub fn write(worker_id: i32, mark: i64) {
    let created = !std::path::Path::new(FILE).exists();
    if created {
        match std::fs::create_dir(DIRECTORY) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => io_error("create the directory of", e),
        }
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(FILE)
        .unwrap_or_else(|e| io_error("open", e));
    file.write_all_at(&mark.to_le_bytes(), offset(worker_id)).unwrap_or_else(|e| io_error("write", e));
    file.sync_data().unwrap_or_else(|e| io_error("fsync", e));
    if created {
        // The new file's directory entry must be durable too.
        File::open(DIRECTORY)
            .and_then(|dir| dir.sync_all())
            .unwrap_or_else(|e| io_error("fsync the directory of", e));
    }
}
