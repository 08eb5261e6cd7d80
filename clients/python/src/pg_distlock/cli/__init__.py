"""`pg-distlock` (also `python -m pg_distlock`): what pg_distlock holds and
who waits, from a terminal or a monitor, and the admin actions people need
at 3 a.m. Connects with a conninfo (`--dsn`) or the usual PG* variables.

Exit codes: 0 ok; 1 `status --check` found a problem, or an action was
declined; 2 usage error; 3 the database refused or could not be reached;
141 the reader of the output went away (`| head`), quietly.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Optional, Sequence, TextIO

import psycopg

from ..inspect import actions, health, reads
from . import render

EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, EXIT_DATABASE = 0, 1, 2, 3
# As a shell reports a command that SIGPIPE ended.
EXIT_BROKEN_PIPE = 128 + 13


def _global_options(parser: argparse.ArgumentParser, default: Any) -> None:
    """--dsn and --json, accepted before the command and after it (where
    people type them): after it they default to nothing, so that one given
    before is kept."""
    parser.add_argument("--dsn", default="" if default is None else default,
                        help="libpq conninfo or URI (default: the PG* environment variables)")
    parser.add_argument("--json", action="store_true", default=False if default is None else default,
                        help="print JSON instead of tables")


class _CommandParser(argparse.ArgumentParser):
    """A command's parser: it takes the global options too."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        _global_options(self, argparse.SUPPRESS)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pg-distlock",
        description="Inspect and operate pg_distlock: claims, locks and waits, queues, leases, leaders.",
    )
    _global_options(parser, None)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_CommandParser)

    status = commands.add_parser("status", help="one screen: versions, storage, claims, waits, queues, leases, sweep")
    status.add_argument("--check", action="store_true", help="exit 1 when something needs a person (see the options)")
    status.add_argument("--sweep-minutes", type=float, default=5.0, metavar="N",
                        help="--check: the sweep must have run in the last N minutes (default 5)")
    status.add_argument("--max-dead", type=int, default=0, metavar="N",
                        help="--check: at most N dead jobs (default 0)")
    commands.add_parser("tasks", help="scheduled tasks: next run, last status, the running claim and its token")
    commands.add_parser("locks", help="advisory locks held and awaited, and the wait-for graph")
    queue = commands.add_parser("queue", help="queues by status, oldest pending job, dead jobs")
    queue.add_argument("--dead", type=int, default=20, metavar="N", help="list up to N dead jobs (admin; default 20)")
    commands.add_parser("leases", help="leases and semaphore holders")
    commands.add_parser("leaders", help="election groups: leader, term, expiry")

    for name, what, which in (("retry-dead", "give dead jobs one more attempt", "dead"),
                              ("delete-dead", "delete dead jobs", "dead"),
                              ("requeue", "take processing jobs back from their consumers", "processing")):
        action = commands.add_parser(name, help=f"admin: {what} (of --queue, or the ids given; all when neither)")
        action.add_argument("--queue", help=f"only this queue's {which} jobs")
        action.add_argument("ids", nargs="*", type=int, metavar="ID", help="only these jobs")
        action.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    for name, what in (("pause", "pause a queue"), ("resume", "resume a queue")):
        action = commands.add_parser(name, help=f"admin: {what}")
        action.add_argument("queue")
        action.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    limit = commands.add_parser("limit", help="admin: set a queue's concurrency limit (jobs processing at once)")
    limit.add_argument("queue")
    limit.add_argument("max_processing", metavar="N|none", type=_limit,
                       help="at most N jobs of the queue processing at once; none removes the limit")
    limit.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    run_now = commands.add_parser("run-now", help="admin: make a scheduled task due now (its schedule stays)")
    run_now.add_argument("task_id", type=int, metavar="TASK_ID")
    run_now.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    for name, what in (("enable-task", "enable a scheduled task (workers claim it when due)"),
                       ("disable-task", "disable a scheduled task (no worker claims it; a running claim goes on)")):
        action = commands.add_parser(name, help=f"admin: {what}")
        action.add_argument("task_id", type=int, metavar="TASK_ID")
        action.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    release = commands.add_parser("release-lease", help="admin: force-release a lease (its holder's token stops working)")
    release.add_argument("name")
    release.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    console = commands.add_parser("console", help="serve the web console (needs the console extra)")
    console.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    console.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    console.add_argument("--pool-size", type=int, default=4, metavar="N",
                         help="at most N connections to the database (default 4)")
    console.add_argument("--allowed-host", action="append", dest="allowed_hosts", metavar="NAME",
                         help="a Host header to answer besides loopback names and --host (repeat)")
    exporter = commands.add_parser("metrics", help="Prometheus metrics: print them once, or serve them with --listen "
                                                   "(needs the console extra)")
    exporter.add_argument("--listen", metavar="[HOST:]PORT",
                          help="serve GET /metrics on HOST:PORT (host 127.0.0.1 unless given)")
    sweep = commands.add_parser("sweep", help="admin: run the recovery sweep now")
    sweep.add_argument("--timeout-minutes", type=int, default=30, metavar="N",
                       help="timeout of tasks without their own (default 30)")
    sweep.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    return parser


def _limit(value: str) -> Optional[int]:
    if value.lower() == "none":
        return None
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if limit < 1:
        raise argparse.ArgumentTypeError(f"a positive number of jobs or none, got {value!r}")
    return limit


# What each command needs besides connecting (docs/privileges.md).
ADMIN_COMMANDS = frozenset({"retry-dead", "delete-dead", "requeue", "pause", "resume", "limit", "run-now",
                            "enable-task", "disable-task", "release-lease", "sweep"})


def _needed_capability(command: str, role: Optional[str]) -> str:
    """The line that says which capability `command` needs, after a 42501."""
    capability = "admin" if command in ADMIN_COMMANDS else "monitor"
    literal = (role or "ROLE").replace("'", "''")
    grant = f"SELECT distlock.grant_capability('{literal}', '{capability}');"
    return (f"pg-distlock {command} needs the {capability} capability; the extension's owner can grant it: {grant}"
            + ("" if capability == "admin" else " (or make the role a member of pg_monitor)"))


def _reachable(dsn: str, label: str) -> bool:
    """Whether a server is there to serve the console's pages from, said
    before serving them (a wrong --dsn used to start anyway, each page then
    waiting 10 s)."""
    from .._sync import check_source
    from ..errors import DistlockError

    try:
        check_source(dsn, label)
    except DistlockError as error:
        print(f"pg-distlock: {error}", file=sys.stderr)
        return False
    return True


def _console(args: argparse.Namespace) -> int:
    try:
        from ..console import serve
    except ImportError as error:
        print(f"pg-distlock console needs the console extra: pip install 'pg-distlock[console]' ({error})",
              file=sys.stderr)
        return EXIT_USAGE
    if not _reachable(args.dsn, "pg-distlock console"):
        return EXIT_DATABASE
    print(f"pg-distlock console on http://{args.host}:{args.port}/", file=sys.stderr)
    serve(args.dsn, args.host, args.port, args.pool_size, args.allowed_hosts)
    return EXIT_OK


def _listen_address(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen wants [HOST:]PORT, got {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _metrics(args: argparse.Namespace, out: TextIO) -> int:
    try:
        from prometheus_client import generate_latest

        from .. import metrics
    except ImportError as error:
        print(f"pg-distlock metrics needs the console extra: pip install 'pg-distlock[console]' ({error})",
              file=sys.stderr)
        return EXIT_USAGE
    # No check of the conninfo here: an exporter reports a database it
    # cannot reach as pg_distlock_up 0.
    if args.listen is None:
        with metrics.open_pool(args.dsn) as pool:
            out.write(generate_latest(metrics.registry(pool)).decode())
        return EXIT_OK
    try:
        host, port = _listen_address(args.listen)
    except ValueError as error:
        print(f"pg-distlock: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        metrics.serve(args.dsn, host, port, lambda: print(f"pg-distlock metrics on http://{host}:{port}/metrics",
                                                           file=sys.stderr))
    except OSError as error:
        print(f"pg-distlock: cannot listen on {host}:{port}: {error.strerror or error}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def _ask(question: str, stdin: TextIO, out: TextIO) -> bool:
    out.write(f"{question} [y/N] ")
    out.flush()
    answer = stdin.readline()
    if not answer:
        out.write("\n")
    return answer.strip().lower() in ("y", "yes")


def _connect(dsn: str) -> psycopg.Connection[Any]:
    # Autocommit: nothing here holds a transaction, or a lock, past its statement.
    return psycopg.connect(dsn, autocommit=True, application_name="pg-distlock")


def main(argv: Sequence[str] | None = None, stdin: TextIO | None = None, stdout: TextIO | None = None) -> int:
    try:
        return _main(argv, stdin, stdout)
    except BrokenPipeError:
        # The reader went away (`| head`): end quietly, as a command killed
        # by SIGPIPE does, and keep the interpreter's last flush from
        # failing again on the closed pipe.
        if stdout is None:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _main(argv: Sequence[str] | None, stdin: TextIO | None, stdout: TextIO | None) -> int:
    args = _parser().parse_args(argv)
    out = stdout or sys.stdout
    if args.command == "console":
        return _console(args)
    if args.command == "metrics":
        return _metrics(args, out)
    confirm: Callable[[str], bool] = lambda question: _ask(question, stdin or sys.stdin, out)
    role = None
    try:
        with _connect(args.dsn) as conn:
            role = conn.info.user
            reads.require_installed(conn)
            result = _run(args, conn, out, confirm)
            out.flush()
            return result
    except (psycopg.Error, reads.NotInstalled) as error:
        print(f"pg-distlock: {str(error).strip()}", file=sys.stderr)
        if isinstance(error, psycopg.errors.InsufficientPrivilege):
            print(_needed_capability(args.command, role), file=sys.stderr)
        return EXIT_DATABASE


def _run(args: argparse.Namespace, conn: psycopg.Connection[Any], out: TextIO,
         confirm: Callable[[str], bool]) -> int:
    command = args.command
    if command == "status":
        status = reads.status(conn)
        problems = health.problems(status, args.sweep_minutes, args.max_dead) if args.check else []
        render.status(status, problems, args.json, out)
        return EXIT_PROBLEM if problems else EXIT_OK
    if command == "locks":
        locks, waits = reads.locks(conn), reads.waits(conn)
        render.locks(locks, waits, args.json, out)
        return EXIT_OK
    if command == "queue":
        render.tables({"queues": reads.queues(conn), "dead jobs": reads.dead_jobs(conn, args.dead)}, args.json, out)
        return EXIT_OK
    if command in ("tasks", "leases", "leaders"):
        render.tables({command: getattr(reads, command)(conn)}, args.json, out)
        return EXIT_OK
    try:
        action = actions.plan(conn, command, queue=getattr(args, "queue", None), ids=getattr(args, "ids", None),
                              name=getattr(args, "name", None), timeout_minutes=getattr(args, "timeout_minutes", 30),
                              max_processing=getattr(args, "max_processing", None),
                              task_id=getattr(args, "task_id", None))
    except ValueError as error:  # what the database does not have (no such task)
        print(f"pg-distlock: {error}", file=sys.stderr)
        return EXIT_DATABASE
    if not (args.yes or confirm(action.question)):
        print("cancelled", file=out)
        return EXIT_PROBLEM
    done = actions.perform(conn, action)
    render.action(command, done, args.json, out)
    return EXIT_OK
