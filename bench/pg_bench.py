"""statewright on PostgreSQL: step throughput and per-step latency with 1, 2 and 4 worker
processes, one SQLite worker on the same workload beside them, a hand-written single-row
INSERT+COMMIT loop on the same server as the floor, and how fast an idle worker picks up
a new command (the shipped Worker waits on LISTEN/NOTIFY; also a clock-level wait, for comparison).

    .venv/bin/python bench/pg_bench.py                 # the full run (a minute or two)
    .venv/bin/python bench/pg_bench.py --quick         # a smoke run
    .venv/bin/python bench/pg_bench.py --url postgresql://user@host:5432/db

The server URL defaults to $STATEWRIGHT_TEST_PG_URL, else postgresql://postgres@127.0.0.1:5432/test.
Each run works in a schema of its own, dropped afterwards. Every figure printed is measured
by this run; nothing is copied from anywhere else.

Workload: tasks of a workflow of N code steps whose callable returns True, through the real
worker path (claim, read the states, run the callable, then append the outcome and claim the
next step in one transaction, which outcomes produced together share). Per-step latency runs
from the worker starting to perform a command to its outcome committed (and the next command
claimed), so it includes waiting behind the worker's other claimed steps."""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_URL = os.environ.get("STATEWRIGHT_TEST_PG_URL") or "postgresql://postgres@127.0.0.1:5432/test"


# --- the code steps (imported by the worker processes as ``pg_bench:...``) ----------------
def noop(ctx: Any) -> bool:
    return True


def stamp(ctx: Any) -> bool:
    """Write when the step started, for the pickup measurement."""
    with open(os.environ["PG_BENCH_STAMPS"], "a", encoding="utf-8") as fh:
        fh.write(f"{ctx.task_id} {time.time_ns()}\n")
    return True


# --- the worker process --------------------------------------------------------------------
def child(url: str, workspace: str, out: str, mode: str) -> int:
    """Report ready, wait for "go" on stdin, work until SIGTERM, then write what was timed."""
    import importlib

    from statewright import Engine, Worker
    from statewright.runtime.clock import SystemClock
    from statewright.store import open_store

    for module in ("pg_bench", "statewright.executors"):  # a first step should not pay for imports
        importlib.import_module(module)
    store = open_store(url)

    class ListeningClock(SystemClock):
        def sleep(self, seconds: float, wake: threading.Event | None = None) -> None:
            store.wait_for_work(seconds, wake)

    if mode == "listen":  # a clock whose idle sleeps wait on wait_for_work (no worker support needed)
        engine = Engine(store, clock=ListeningClock(), workspace_root=Path(workspace))
        worker = Worker(engine, lease_seconds=30, idle_poll_seconds=1.0)
    else:  # the worker as shipped: on PostgreSQL it waits on LISTEN/NOTIFY itself
        engine = Engine(store, workspace_root=Path(workspace))
        worker = Worker(engine, lease_seconds=30)
    worker.install_signal_handlers()
    latencies: list[float] = []
    claims = [0]
    started_at: dict[str, float] = {}
    perform, commit, claim = worker._perform, worker._commit, store.claim

    def timed_perform(c: Any) -> Any:
        started_at[c.command_id] = time.perf_counter()
        return perform(c)

    def timed_commit(batch: Any) -> Any:
        try:
            return commit(batch)
        finally:
            now = time.perf_counter()
            for report in batch:
                t0 = started_at.pop(report.complete[0], None)
                if t0 is not None:
                    latencies.append(now - t0)

    def counted_claim(*args: Any, **kwargs: Any) -> Any:
        claims[0] += 1
        return claim(*args, **kwargs)

    worker._perform = timed_perform  # type: ignore[method-assign]
    worker._commit = timed_commit  # type: ignore[method-assign]
    store.claim = counted_claim  # type: ignore[method-assign]
    print("ready", flush=True)
    sys.stdin.readline()
    started = time.monotonic()
    stats = worker.run()
    Path(out).write_text(json.dumps({
        "latencies": latencies, "commands": stats.commands, "claims": claims[0],
        "seconds": time.monotonic() - started,
    }))
    engine.close()
    return 0


# --- helpers -------------------------------------------------------------------------------
def say(text: str = "") -> None:
    print(text, flush=True)


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:7.2f} ms"


@dataclass
class Db:
    """One database to run on: a fresh PostgreSQL schema or a SQLite file."""

    url: str
    cleanup: Any

    def close(self) -> None:
        self.cleanup()


def fresh_pg(server: str) -> Db:
    import psycopg

    name = f"swbench_{uuid.uuid4().hex[:10]}"
    sep = "&" if "?" in server else "?"

    def drop() -> None:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')

    return Db(f"{server}{sep}schema={name}", drop)


def fresh_sqlite(tmp: Path) -> Db:
    path = tmp / f"bench-{uuid.uuid4().hex[:8]}.db"
    return Db(str(path), lambda: [p.unlink() for p in tmp.glob(path.name + "*")])


def workflow(steps: int, callable_ref: str) -> Any:
    from statewright.definition.builder import WorkflowBuilder

    b = WorkflowBuilder(f"bench-{steps}")
    for i in range(steps):
        b = b.code(f"s{i + 1}", owner="bench", run={"callable": callable_ref})
    return b.build()


class Workers:
    """Worker processes that are started, report ready, and are released together."""

    def __init__(self, url: str, n: int, tmp: Path, mode: str, env: dict[str, str] | None = None) -> None:
        self.outs = [tmp / f"out-{uuid.uuid4().hex[:8]}.json" for _ in range(n)]
        child_env = {**os.environ, "PYTHONPATH": str(HERE), **(env or {})}
        self.procs = [
            subprocess.Popen(
                [sys.executable, str(HERE / "pg_bench.py"), "--child", url, str(tmp / "ws"), str(out), mode],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env, cwd=tmp, text=True,
            )
            for out in self.outs
        ]
        for p in self.procs:
            line = p.stdout.readline() if p.stdout else ""
            if line.strip() != "ready":
                self.stop()
                raise SystemExit(f"a worker process did not start (said {line!r}); see its stderr above")

    def go(self) -> None:
        for p in self.procs:
            if p.stdin:
                p.stdin.write("go\n")
                p.stdin.flush()

    def stop(self) -> list[dict[str, Any]]:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            p.wait(timeout=60)
        return [json.loads(o.read_text()) for o in self.outs if o.exists()]


# --- the measurements ----------------------------------------------------------------------
def run_throughput(db: Db, n_workers: int, tasks: int, steps: int, tmp: Path) -> dict[str, Any]:
    from statewright import Engine
    from statewright.store import open_store

    engine = Engine(open_store(db.url), workspace_root=tmp / "ws")
    wf = workflow(steps, "pg_bench:noop")
    for i in range(tasks):
        engine.submit(wf, {"n": i})
    mode = "listen" if db.url.startswith("postgresql://") else "poll"  # SQLite has no one to listen to
    workers = Workers(db.url, n_workers, tmp, mode)
    t_go = time.time()
    workers.go()
    try:
        while engine.store.counts_by_status().get("completed", 0) < tasks:
            time.sleep(0.01)
        last_ms = max(e.at_ms for tid in engine.store.task_ids() for e in engine.store.events(tid)[-1:])
    finally:
        reports = workers.stop()
        engine.close()
    wall = max(1e-9, last_ms / 1000 - t_go)
    lat = [x for r in reports for x in r["latencies"]]
    return {"steps": tasks * steps, "seconds": wall, "rate": tasks * steps / wall,
            "p50": pct(lat, 50), "p99": pct(lat, 99), "n_lat": len(lat)}


def run_floor_pg(server: str, rows: int) -> dict[str, float]:
    import psycopg

    table = f"swbench_floor_{uuid.uuid4().hex[:8]}"
    body = "x" * 200
    lat: list[float] = []
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        try:
            started = time.perf_counter()
            for i in range(rows):
                t = time.perf_counter()
                conn.execute(f"INSERT INTO {table} (id, body) VALUES (%s, %s)", (i, body))
                lat.append(time.perf_counter() - t)
            wall = time.perf_counter() - started
        finally:
            conn.execute(f"DROP TABLE {table}")
    return {"rate": rows / wall, "p50": pct(lat, 50), "p99": pct(lat, 99)}


def run_floor_sqlite(tmp: Path, rows: int) -> dict[str, float]:
    path = tmp / "floor.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("CREATE TABLE floor (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    body = "x" * 200
    lat: list[float] = []
    started = time.perf_counter()
    for i in range(rows):
        t = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO floor (id, body) VALUES (?, ?)", (i, body))
        conn.execute("COMMIT")
        lat.append(time.perf_counter() - t)
    wall = time.perf_counter() - started
    conn.close()
    return {"rate": rows / wall, "p50": pct(lat, 50), "p99": pct(lat, 99)}


def run_pickup(db: Db, mode: str, samples: int, tmp: Path) -> dict[str, float]:
    """Submit one single-step task at a time to an idle worker; time until its step starts."""
    from statewright import Engine
    from statewright.store import open_store

    stamps = tmp / f"stamps-{uuid.uuid4().hex[:8]}.txt"
    stamps.touch()
    engine = Engine(open_store(db.url), workspace_root=tmp / "ws")
    wf = workflow(1, "pg_bench:stamp")
    engine.register(wf)
    workers = Workers(db.url, 1, tmp, mode, env={"PG_BENCH_STAMPS": str(stamps)})
    workers.go()
    rng = random.Random(7)
    from_call: list[float] = []
    from_commit: list[float] = []
    try:
        time.sleep(0.5)  # let it go idle
        for i in range(samples):
            tid = f"pick-{i}"
            t_call = time.time_ns()
            engine.submit(wf, {}, task_id=tid)
            t_commit = time.time_ns()
            deadline = time.monotonic() + 10
            while True:
                lines = [ln.split() for ln in stamps.read_text().splitlines()]
                hit = [int(ln[1]) for ln in lines if ln[0] == tid]
                if hit:
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"pickup: task {tid} was not picked up within 10 s")
                time.sleep(0.001)
            from_call.append((hit[0] - t_call) / 1e9)
            from_commit.append((hit[0] - t_commit) / 1e9)
            time.sleep(rng.uniform(0.15, 0.3))  # idle again before the next one
        time.sleep(2.0)  # a stretch of pure idleness for the idle query rate
    finally:
        reports = workers.stop()
        engine.close()
    claims = reports[0]["claims"] if reports else 0
    return {"p50_call": pct(from_call, 50), "p99_call": pct(from_call, 99), "max_call": max(from_call),
            "p50_commit": pct(from_commit, 50), "p99_commit": pct(from_commit, 99),
            "claims_per_s": claims / max(1e-9, reports[0]["seconds"]) if reports else 0.0}


def server_facts(server: str) -> str:
    import psycopg

    with psycopg.connect(server) as conn:
        ver = conn.execute("SHOW server_version").fetchone()
        sync = conn.execute("SHOW synchronous_commit").fetchone()
        fsync = conn.execute("SHOW fsync").fetchone()
    def first(row: Any) -> str:
        return str(row[0]) if row else "?"

    return f"PostgreSQL {first(ver)} (synchronous_commit={first(sync)}, fsync={first(fsync)})"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        return child(*argv[1:5])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=DEFAULT_URL, help="PostgreSQL server URL")
    ap.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    ap.add_argument("--tasks", type=int, help="tasks per throughput run")
    ap.add_argument("--steps", type=int, default=5, help="code steps per task")
    args = ap.parse_args(argv)
    tasks = args.tasks or (40 if args.quick else 200)
    floor_rows = 300 if args.quick else 2000
    pickups = 5 if args.quick else 25
    reps = 1 if args.quick else 3
    try:
        facts = server_facts(args.url)
    except Exception as exc:
        raise SystemExit(f"cannot reach PostgreSQL at {args.url} ({exc}); pass --url") from None
    load1 = os.getloadavg()[0]

    say("statewright PostgreSQL benchmark")
    say(f"  host: {platform.machine()}, {os.cpu_count()} CPUs, load average {load1:.2f} at start; "
        f"Python {platform.python_version()}")
    say(f"  server: {facts} at {args.url}")
    say(f"  workload: {tasks} tasks x {args.steps} python-callable code steps = {tasks * args.steps} "
        "steps per run, real worker processes")
    say()
    tmp = Path(tempfile.mkdtemp(prefix="swbench-"))
    try:
        say("Floor: hand-written single-row INSERT + COMMIT loop, one connection")
        f_pg = run_floor_pg(args.url, floor_rows)
        say(f"  PostgreSQL        {f_pg['rate']:8.0f} commits/s   p50 {ms(f_pg['p50'])}   p99 {ms(f_pg['p99'])}")
        f_sq = run_floor_sqlite(tmp, floor_rows)
        say(f"  SQLite (FULL,WAL) {f_sq['rate']:8.0f} commits/s   p50 {ms(f_sq['p50'])}   p99 {ms(f_sq['p99'])}")
        say()
        say(f"Step transitions (each step = one durable outcome commit that also claims the next step);"
            f" {reps} runs each, median run shown")
        say(f"  {'backend':<12}{'workers':>8}{'steps/s':>10}{'vs floor':>10}{'p50 step':>13}{'p99 step':>13}"
            "   steps/s of each run")
        rows: list[tuple[str, int, dict[str, Any], float]] = []
        for backend, n, floor_rate in (("PostgreSQL", 1, f_pg["rate"]), ("PostgreSQL", 2, f_pg["rate"]),
                                       ("PostgreSQL", 4, f_pg["rate"]), ("SQLite", 1, f_sq["rate"])):
            runs = []
            for _ in range(reps):
                db = fresh_pg(args.url) if backend == "PostgreSQL" else fresh_sqlite(tmp)
                try:
                    runs.append(run_throughput(db, n, tasks, args.steps, tmp))
                finally:
                    db.close()
            r = sorted(runs, key=lambda x: x["rate"])[len(runs) // 2]
            rows.append((backend, n, r, floor_rate))
            each = ", ".join(f"{x['rate']:.0f}" for x in runs)
            say(f"  {backend:<12}{n:>8}{r['rate']:>10.0f}{r['rate'] / floor_rate:>9.2f}x"
                f"{ms(r['p50']):>13}{ms(r['p99']):>13}   {each}")
        say()
        say(f"Pickup: an idle worker, a new single-step task every 150-300 ms ({pickups} samples);"
            " time until the step starts")
        modes = (("listen", "clock waits on wait_for_work"), ("poll", "Worker as shipped (LISTEN)"))
        for mode, label in modes:
            db = fresh_pg(args.url)
            try:
                p = run_pickup(db, mode, pickups, tmp)
            finally:
                db.close()
            say(f"  {label:<31} from commit: p50 {ms(p['p50_commit'])}  p99 {ms(p['p99_commit'])};"
                f"  from submit(): p50 {ms(p['p50_call'])}  max {ms(p['max_call'])};"
                f"  idle claim queries {p['claims_per_s']:.1f}/s")
        say()
        one, two = rows[0][2]["rate"], rows[1][2]["rate"]
        cost = f_pg["rate"] / one  # a step's cost in floor commits
        say("GOALS")
        say(f"  one worker's per-step cost <= 2x the floor     {cost:5.2f}x ({one:.0f} steps/s vs "
            f"{f_pg['rate']:.0f} commits/s)   {'PASS' if cost <= 2 else 'MISS'}")
        say(f"  pickup within 50 ms (as shipped, max from submit)  {p['max_call'] * 1000:6.2f} ms"
            f"              {'PASS' if p['max_call'] < 0.05 else 'MISS'}")
        say(f"  throughput grows from 1 to 2 workers           {one:.0f} -> {two:.0f} steps/s"
            f"          {'PASS' if two > one else 'MISS'}")
        say()
        say(f"  load average at end {os.getloadavg()[0]:.2f} (other processes on this host share the CPUs)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
