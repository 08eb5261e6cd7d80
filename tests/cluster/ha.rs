//! The Patroni stack started by `scripts/ha.sh` (two PostgreSQL nodes, one
//! etcd): where it is, which node leads, switching synchronous replication
//! on and off, and killing the leader.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use crate::support::*;

pub struct Ha {
    pub ports: [u16; 2],
    api: [u16; 2],
}

fn ports(var: &str) -> Option<[u16; 2]> {
    let value = std::env::var(var).ok()?;
    let ports: Vec<u16> = value.split(',').map(|p| p.parse().unwrap_or_else(|_| panic!("{var}: {value}"))).collect();
    Some(ports.try_into().unwrap_or_else(|_| panic!("{var} names two ports: {value}")))
}

impl Ha {
    /// The stack, or None (the test is skipped, and says so) when
    /// DISTLOCK_TEST_HA_PORTS is not set.
    pub fn from_env(test: &str) -> Option<Ha> {
        let Some(ports) = ports("DISTLOCK_TEST_HA_PORTS") else {
            eprintln!("{test}: skipped, DISTLOCK_TEST_HA_PORTS is not set (scripts/test.sh sets it after scripts/ha.sh start)");
            return None;
        };
        let api = ports_or_panic("DISTLOCK_TEST_HA_API_PORTS");
        Some(Ha { ports, api })
    }

    /// Every node in one conninfo: libpq-style clients try them in turn and
    /// keep the one that accepts writes.
    pub fn conninfo(&self, db: &str) -> String {
        format!(
            "host=127.0.0.1,127.0.0.1 port={},{} user=postgres dbname={db} target_session_attrs=read-write connect_timeout=2",
            self.ports[0], self.ports[1]
        )
    }

    /// The port of the node that accepts writes now, if one does.
    pub fn leader(&self) -> Option<u16> {
        self.ports.into_iter().find(|&port| {
            let url = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres connect_timeout=2");
            Client::connect(&url, NoTls)
                .and_then(|mut c| c.query_one("SELECT NOT pg_is_in_recovery()", &[]))
                .is_ok_and(|r| r.get(0))
        })
    }

    /// Waits for a leader whose standby streams to it, synchronously or not
    /// as asked (Patroni's synchronous_mode is switched to match). Patroni
    /// must agree, not only PostgreSQL: it fails over only to the standby
    /// it has recorded as synchronous in etcd.
    pub fn healthy(&self, synchronous: bool) -> u16 {
        let body = format!("{{\"synchronous_mode\": {synchronous}, \"synchronous_mode_strict\": {synchronous}}}");
        let (role, state) = if synchronous { ("/sync", "sync") } else { ("/async", "async") };
        let mut leader = 0;
        eventually("a leader and a streaming standby", Duration::from_secs(120), || {
            let Some(port) = self.leader() else { return false };
            leader = port;
            let (l, s) = if port == self.ports[0] { (0, 1) } else { (1, 0) };
            // Any node's API takes the change; it goes through etcd.
            let _ = http(self.api[l], "PATCH", "/config", &body);
            let mut c = connect_to(port, "postgres", "ha-test");
            http(self.api[l], "GET", "/primary", "").is_ok_and(|code| code == 200)
                && http(self.api[s], "GET", role, "").is_ok_and(|code| code == 200)
                && count(&mut c, &format!("SELECT 1 FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = '{state}'")) == 1
        });
        leader
    }

    /// Waits for the node that is not `old` to accept writes.
    pub fn promoted(&self, old: u16) -> u16 {
        eventually("the standby to be promoted", Duration::from_secs(60), || self.leader().is_some_and(|p| p != old));
        self.leader().expect("leader")
    }
}

fn ports_or_panic(var: &str) -> [u16; 2] {
    ports(var).unwrap_or_else(|| panic!("{var} is not set: run these tests through scripts/test.sh"))
}

/// kill -9 of the postmaster of the server on `port` (found as the parent
/// of one of its backends): its backends exit when they notice, without
/// acknowledging anything they had not already.
pub fn kill_postmaster(port: u16) -> i32 {
    let mut c = connect_to(port, "postgres", "ha-test");
    let backend = backend_pid(&mut c);
    let stat = std::fs::read_to_string(format!("/proc/{backend}/stat")).expect("backend stat");
    // pid (comm) state ppid ...; comm has no spaces for a backend
    let postmaster: i32 = stat.split(' ').nth(3).expect("ppid").parse().expect("ppid number");
    signal(postmaster, "-KILL");
    postmaster
}

pub fn signal(pid: i32, sig: &str) {
    let status = Command::new("kill").args([sig, &pid.to_string()]).status().expect("kill");
    assert!(status.success(), "kill {sig} {pid}");
}

/// A minimal HTTP/1.0 request to Patroni's REST API; returns the status code.
fn http(port: u16, method: &str, path: &str, body: &str) -> std::io::Result<u16> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = String::new();
    s.read_to_string(&mut response)?;
    Ok(response.split(' ').nth(1).and_then(|code| code.parse().ok()).unwrap_or(0))
}
