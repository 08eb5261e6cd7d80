"""One node of the two-process leader tests, run as its own process:
campaigns for a group and records, every few milliseconds, each moment it
reports leadership, as `t_before t_after term` (wall clock around the
`is_leader` read), flushed at once so a SIGKILL loses nothing said.

    python leader_node.py DSN GROUP NODE TTL HISTORY SCENARIO SECONDS

SCENARIO: plain | slow (on_elected sleeps 3 TTLs) | raising (on_elected
raises) | signals (handle_signals=True). Exit 3: stop() raised the
callback's error, as it must in `raising`."""

from __future__ import annotations

import sys
import time

import pg_distlock


class CallbackFailed(RuntimeError):
    pass


def main() -> int:
    dsn, group, node, ttl_text, history_path, scenario, seconds = sys.argv[1:8]
    ttl = float(ttl_text)

    def on_elected(term: int) -> None:
        if scenario == "slow":
            time.sleep(3 * ttl)
        elif scenario == "raising":
            raise CallbackFailed(f"{node} refuses term {term}")

    leader = pg_distlock.Leader(
        f"{dsn} application_name=leader-{node}", group, node, ttl=ttl,
        on_elected=on_elected, handle_signals=scenario == "signals",
    )
    with open(history_path, "a", buffering=1) as history:
        leader.start()
        history.write("started\n")
        end = time.monotonic() + float(seconds)
        while time.monotonic() < end and leader.failure is None:
            before = time.time()
            leading = leader.is_leader
            term = leader.term
            after = time.time()
            if leading:
                history.write(f"{before:.6f} {after:.6f} {term}\n")
            time.sleep(0.005)
        try:
            leader.stop()
        except CallbackFailed:
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
