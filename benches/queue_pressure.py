"""One system of benches/queue_pressure.sh: Phase A of hardbyte's job-queue
benchmark (a producer keeping ~4,000 jobs of ~256 bytes ready, W workers
claiming up to 64 and working 1 ms per job), run through a warm-up, an
unpressured phase, a phase during which one session holds a REPEATABLE READ
snapshot open on the queue's database, and a phase after it is released.

The producer's ready count is kept here, on the client side (produced minus
claimed): a producer that counted the queue's table would itself slow down
under the held snapshot and starve the workers. Jobs are counted when their
completion has committed (pg_distlock: the next settle_and_consume_tasks
call; pgmq: archive; PgQue: finish_batch).

Every window (--window seconds) appends a row to --windows: jobs/s, the
ratio to this system's median unpressured rate (filled in at the end),
dead tuples in the system's schema, WAL bytes and server CPU per job; at the
end one row goes to --summary. With --statements, pg_stat_statements is
reset at each phase's start and its top statements appended to
--statements at the phase's end.

The statements are those of benches/pgbench/fleet_fused.sql,
peer_pgmq_*.sql and peer_pgque_*.sql, less their server-side counting.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import threading
import time

import psycopg

SCHEMA = {"pg_distlock": "distlock", "pgmq": "pgmq", "pgque": "pgque"}
PAYLOADS = "ARRAY(SELECT pg_catalog.jsonb_build_object('pad', repeat('x', 240)){} FROM generate_series(1, 128))"
PRODUCE = {
    "pg_distlock": f"SELECT count(*) FROM distlock.enqueue_tasks('job', {PAYLOADS.format('')})",
    "pgmq": f"SELECT count(*) FROM pgmq.send_batch('bench', {PAYLOADS.format('')})",
    "pgque": f"SELECT pgque.send_batch('bench', 'default', {PAYLOADS.format('::text')})",
}
PRODUCE_BATCH = 128


class Counters:
    """What the threads tell the sampler, under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.produced = 0
        self.claimed = 0
        self.done = 0
        self.refused = 0
        self.errors: list[str] = []

    def add(self, **kw: int) -> None:
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)

    def error(self, where: str, exc: Exception) -> None:
        with self.lock:
            if len(self.errors) < 20:
                self.errors.append(f"{where}: {exc}")


def connect(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True)


def producer(dsn: str, system: str, depth: int, c: Counters, stop: threading.Event) -> None:
    with connect(dsn) as conn:
        while not stop.is_set():
            with c.lock:
                ready = c.produced - c.claimed
            if ready >= depth:
                time.sleep(0.001)
                continue
            conn.execute(PRODUCE[system])
            c.add(produced=PRODUCE_BATCH)


def distlock_worker(dsn: str, n: int, batch: int, c: Counters, stop: threading.Event) -> None:
    worker = f"worker-{n}"
    ids: list[int] = []
    att: list[int] = []
    with connect(dsn) as conn:
        while not stop.is_set():
            rows = conn.execute(
                "SELECT task_id, attempts, outcome FROM distlock.settle_and_consume_tasks("
                "%s, %s, %s::bigint[], %s::int[], p_wait => '1 second')",
                (batch, worker, ids, att),
            ).fetchall()
            claimed = [r for r in rows if r[2] == "claimed"]
            refused = len(rows) - len(claimed)
            c.add(done=len(ids) - refused, refused=refused, claimed=len(claimed))
            ids = [r[0] for r in claimed]
            att = [r[1] for r in claimed]
            time.sleep(len(ids) / 1000)
        if ids:
            conn.execute("SELECT count(*) FROM distlock.complete_tasks(%s::bigint[], %s, %s::int[])",
                         (ids, worker, att))


def pgmq_worker(dsn: str, n: int, batch: int, c: Counters, stop: threading.Event) -> None:
    with connect(dsn) as conn:
        while not stop.is_set():
            ids = [r[0] for r in conn.execute("SELECT msg_id FROM pgmq.read('bench', 30, %s)", (batch,)).fetchall()]
            c.add(claimed=len(ids))
            if not ids:
                time.sleep(0.005)
                continue
            time.sleep(len(ids) / 1000)
            conn.execute("SELECT count(*) FROM pgmq.archive('bench', %s::bigint[])", (ids,))
            c.add(done=len(ids))


def pgque_worker(dsn: str, n: int, batch: int, c: Counters, stop: threading.Event) -> None:
    # A cooperative subconsumer taking whole tick batches, as
    # peer_pgque_consume.sql; PgQue has no batch size to ask for.
    with connect(dsn) as conn:
        while not stop.is_set():
            row = conn.execute(
                "SELECT batch_id FROM pgque.next_batch_custom('bench', 'bench', %s, '0 ms', 1, '0 ms')", (f"sub_{n}",)
            ).fetchone()
            if row is None or row[0] is None:
                time.sleep(0.005)
                continue
            events = conn.execute("SELECT count(*) FROM pgque.get_batch_events(%s)", (row[0],)).fetchone()[0]
            c.add(claimed=events)
            time.sleep(events / 1000)
            conn.execute("SELECT pgque.finish_batch(%s)", (row[0],))
            c.add(done=events)


WORKER = {"pg_distlock": distlock_worker, "pgmq": pgmq_worker, "pgque": pgque_worker}


def every(dsn: str, sql: str, period: float, c: Counters, stop: threading.Event) -> None:
    """Runs sql every period seconds, each call its own transaction."""
    with connect(dsn) as conn:
        while not stop.wait(period):
            try:
                conn.execute(sql)
            except psycopg.Error as exc:
                c.error(sql, exc)


def guarded(target, c: Counters, name: str):
    def run(*args) -> None:
        try:
            target(*args)
        except Exception as exc:  # noqa: BLE001 - reported, and the run marked
            c.error(name, exc)

    return run


def server_ticks(datadir: str) -> int:
    """CPU clock ticks (user + system) of the postmaster, its live children,
    and the children it has reaped (cutime, cstime)."""
    with open(os.path.join(datadir, "postmaster.pid")) as f:
        postmaster = f.readline().strip()

    def fields(pid: str) -> list[str]:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()

    own = fields(postmaster)
    # After ")": state is field 3 of stat, so utime (14) is index 11.
    total = sum(int(x) for x in own[11:15])
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == postmaster:
            continue
        try:
            f = fields(pid)
        except OSError:
            continue
        if f[1] == postmaster:
            total += int(f[11]) + int(f[12])
    return total


class Sampler:
    def __init__(self, dsn: str, system: str, datadir: str) -> None:
        self.conn = connect(dsn)
        self.schema = SCHEMA[system]
        self.datadir = datadir

    def dead(self) -> int:
        return int(
            self.conn.execute(
                "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables WHERE schemaname = %s", (self.schema,)
            ).fetchone()[0]
        )

    def wal(self) -> int:
        return int(self.conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])

    def rotations(self) -> int | None:
        """PgQue: the queue's last table switch (None elsewhere)."""
        if self.schema != "pgque":
            return None
        row = self.conn.execute("SELECT extract(epoch FROM queue_switch_time) FROM pgque.queue"
                                " WHERE queue_name = 'bench'").fetchone()
        return int(row[0]) if row else None

    def sizes(self) -> tuple[int, int, int]:
        row = self.conn.execute(
            "SELECT coalesce(sum(pg_table_size(relid)), 0), coalesce(sum(pg_indexes_size(relid)), 0),"
            "       coalesce(sum(autovacuum_count), 0)"
            "  FROM pg_stat_user_tables WHERE schemaname = %s",
            (self.schema,),
        ).fetchone()
        return int(row[0]), int(row[1]), int(row[2])


def statements(conn: psycopg.Connection, system: str, phase: str, out: str) -> None:
    rows = conn.execute(
        "SELECT calls, total_exec_time, mean_exec_time, shared_blks_hit + shared_blks_read, rows,"
        "       regexp_replace(left(query, 400), '\\s+', ' ', 'g')"
        "  FROM pg_stat_statements"
        " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND calls > 0"
        " ORDER BY total_exec_time DESC LIMIT 25"
    ).fetchall()
    new = not os.path.exists(out)
    with open(out, "a", newline="") as f:
        w = csv.writer(f)
        if new:
            w.writerow(["system", "phase", "calls", "total_ms", "mean_ms", "blocks_per_call", "rows_per_call", "query"])
        for calls, total, mean, blocks, nrows, query in rows:
            w.writerow([system, phase, calls, f"{total:.0f}", f"{mean:.3f}", f"{blocks / calls:.1f}",
                        f"{nrows / calls:.1f}", query])
    conn.execute("SELECT pg_stat_statements_reset()")


def perf_window(out: str, system: str, phase: str, t_end: int, until: float) -> subprocess.Popen:
    """perf record of the whole machine (call graphs, 99 Hz: a small cost)
    until `until`, into OUT/SYSTEM-PHASE-T.data: where the server's CPU
    goes in that window (benches/perf_top.sh summarises the files)."""
    os.makedirs(out, exist_ok=True)
    seconds = max(0.1, until - time.monotonic() - 0.05)
    return subprocess.Popen(
        ["perf", "record", "-q", "-F", "99", "-a", "-g", "-o", os.path.join(out, f"{system}-{phase}-{t_end:04d}.data"),
         "--", "sleep", f"{seconds:.2f}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dsn")
    p.add_argument("system", choices=sorted(SCHEMA))
    p.add_argument("--datadir", required=True)
    p.add_argument("--windows", required=True)
    p.add_argument("--summary", required=True)
    p.add_argument("--statements")
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--depth", type=int, default=4000)
    p.add_argument("--window", type=int, default=10)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--unpressured", type=int, default=60)
    p.add_argument("--held", type=int, default=120)
    p.add_argument("--after", type=int, default=60)
    p.add_argument("--pressure-sql", default="SELECT count(*) FROM pg_class")
    p.add_argument("--perf", help="a directory: a system-wide perf profile of each window goes there")
    a = p.parse_args()

    c = Counters()
    stop = threading.Event()
    threads = [threading.Thread(target=guarded(producer, c, "producer"), args=(a.dsn, a.system, a.depth, c, stop))]
    for n in range(a.workers):
        threads.append(threading.Thread(target=guarded(WORKER[a.system], c, f"worker {n}"),
                                        args=(a.dsn, n, a.batch, c, stop)))
    if a.system == "pgque":
        # The ticker as benches/queue_fleet.sh drives it (every 50 ms, with
        # the queue's low-latency settings), and the maintenance at the
        # cadence pgque.start() schedules with pg_cron: maint() (rotation
        # step 1) and maint_retry_events() every 30 s, rotation step 2 every
        # 10 s in a transaction of its own.
        for sql, period in (("SELECT pgque.ticker()", 0.05), ("SELECT pgque.maint()", 30),
                            ("SELECT pgque.maint_rotate_tables_step2()", 10),
                            ("SELECT pgque.maint_retry_events()", 30)):
            threads.append(threading.Thread(target=every, args=(a.dsn, sql, period, c, stop)))
    s = Sampler(a.dsn, a.system, a.datadir)
    stats = connect(a.dsn) if a.statements else None
    for t in threads:
        t.start()
    # Let the producer fill the queue before the clock starts.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and c.produced < a.depth:
        time.sleep(0.05)

    phases = [("warmup", a.warmup), ("unpressured", a.unpressured), ("held", a.held), ("after", a.after)]
    rows = []
    holder = None
    clk = os.sysconf("SC_CLK_TCK")
    start = time.monotonic()
    t_next = start
    last = (c.done, s.wal(), server_ticks(a.datadir))
    # PgQue's table rotations seen during the run.
    last_switch, rotations = s.rotations(), 0
    profiles: list[subprocess.Popen] = []
    for phase, seconds in phases:
        if seconds <= 0:
            continue
        if phase == "held":
            holder = connect(a.dsn)
            holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            holder.execute(a.pressure_sql)
            xmin = s.conn.execute("SELECT backend_xmin FROM pg_stat_activity WHERE pid = %s",
                                  (holder.info.backend_pid,)).fetchone()[0]
            print(f"  {a.system:<11} held: pid {holder.info.backend_pid} holds xmin {xmin}", flush=True)
        if phase == "after" and holder is not None:
            holder.execute("ROLLBACK")
            holder.close()
            holder = None
        if stats is not None:
            stats.execute("SELECT pg_stat_statements_reset()")
        windows = max(1, -(-seconds // a.window))
        for _ in range(windows):
            t_next += a.window
            if a.perf:
                # Not waited for here: perf takes about a second to write
                # its file after the window, which would end the count late.
                profiles.append(perf_window(a.perf, a.system, phase, round(t_next - start), t_next))
            time.sleep(max(0.0, t_next - time.monotonic()))
            now = (c.done, s.wal(), server_ticks(a.datadir))
            with c.lock:
                ready = c.produced - c.claimed
            jobs = now[0] - last[0]
            rows.append({
                "phase": phase,
                "t_end_s": round(time.monotonic() - start, 1),
                "jobs": jobs,
                "jobs_per_s": round(jobs / a.window),
                "dead_tuples": s.dead(),
                "wal_bytes_per_job": round((now[1] - last[1]) / jobs) if jobs else "",
                "cpu_ms_per_job": round(1000 * (now[2] - last[2]) / clk / jobs, 3) if jobs else "",
                "server_cpu_pct": round(100 * (now[2] - last[2]) / clk / a.window),
                "ready": ready,
            })
            last = now
            switch = s.rotations()
            if switch is not None and switch != last_switch:
                rotations += last_switch is not None
                last_switch = switch
            r = rows[-1]
            print(f"  {a.system:<11} {phase:<11} {r['t_end_s']:>6}s {r['jobs_per_s']:>7} jobs/s"
                  f"  dead {r['dead_tuples']:>8}  ready {ready:>6}  cpu {r['server_cpu_pct']:>3}%", flush=True)
        if stats is not None:
            statements(stats, a.system, phase, a.statements)
    stop.set()
    for t in threads:
        t.join(timeout=10)
    for profile in profiles:
        profile.wait()
    if holder is not None:
        holder.close()

    base = statistics.median(r["jobs_per_s"] for r in rows if r["phase"] == "unpressured") if a.unpressured else 0
    for r in rows:
        r["ratio"] = round(r["jobs_per_s"] / base, 2) if base else ""
    fields = ["system", "phase", "t_end_s", "jobs", "jobs_per_s", "ratio", "dead_tuples", "wal_bytes_per_job",
              "cpu_ms_per_job", "server_cpu_pct", "ready"]
    new = not os.path.exists(a.windows)
    with open(a.windows, "a", newline="") as f:
        w = csv.DictWriter(f, fields)
        if new:
            w.writeheader()
        for r in rows:
            w.writerow({"system": a.system, **r})

    def phase_of(name: str) -> list[dict]:
        return [r for r in rows if r["phase"] == name]

    def per_job(name: str, key: str) -> str:
        # Weighted by jobs: the phase's total over its jobs.
        rs = [r for r in phase_of(name) if r[key] != ""]
        jobs = sum(r["jobs"] for r in rs)
        value = sum(r[key] * r["jobs"] for r in rs) / jobs if jobs else None
        return "" if value is None else f"{value:.0f}" if value >= 100 else f"{value:.4f}"

    held = phase_of("held")
    table, index, autovacuums = s.sizes()
    summary = {
        "system": a.system,
        "unpressured_jobs_s": round(base),
        "held_first": held[0]["jobs_per_s"] if held else "",
        "held_last": held[-1]["jobs_per_s"] if held else "",
        "held_median": round(statistics.median(r["jobs_per_s"] for r in held)) if held else "",
        "held_median_ratio": f"{statistics.median(r['ratio'] for r in held):.2f}" if held and base else "",
        "held_min_ratio": f"{min(r['ratio'] for r in held):.2f}" if held and base else "",
        "after_last_ratio": f"{phase_of('after')[-1]['ratio']:.2f}" if phase_of("after") and base else "",
        "dead_tuples_end": s.dead(),
        "table_bytes_end": table,
        "index_bytes_end": index,
        "autovacuums": autovacuums,
        "wal_bytes_per_job_unpressured": per_job("unpressured", "wal_bytes_per_job"),
        "wal_bytes_per_job_held": per_job("held", "wal_bytes_per_job"),
        "cpu_ms_per_job_unpressured": per_job("unpressured", "cpu_ms_per_job"),
        "cpu_ms_per_job_held": per_job("held", "cpu_ms_per_job"),
        "pgque_rotations": rotations if a.system == "pgque" else "",
        "refused": c.refused,
        "errors": len(c.errors),
    }
    new = not os.path.exists(a.summary)
    with open(a.summary, "a", newline="") as f:
        w = csv.DictWriter(f, list(summary))
        if new:
            w.writeheader()
        w.writerow(summary)
    for e in c.errors:
        print(f"  {a.system} error: {e}", flush=True)


if __name__ == "__main__":
    main()
