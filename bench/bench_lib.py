"""Building blocks of ``sqlite_bench.py``: the workflows, the floor loop, timed worker runs,
pre-filling a database with realistic finished tasks, and the child processes."""

from __future__ import annotations

import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
STEPS = 8  # code steps per task in the main workload
FLOOR_BODY = "x" * 400  # about the size of a logged AttemptReported body


def store_url(db: Path, synchronous: str = "FULL") -> str:
    return f"sqlite:///{db}?synchronous={synchronous}"


# --- workflows -----------------------------------------------------------------------------


def eight_step_workflow() -> Any:
    from statewright import WorkflowBuilder

    b = WorkflowBuilder("bench-eight-steps")
    for i in range(1, STEPS + 1):
        b.code(f"s{i}", owner="bench", run={"callable": "bench_steps:noop"})
    return b.build()


def approval_workflow() -> Any:
    from statewright import WorkflowBuilder

    b = WorkflowBuilder("bench-approval")
    b.human("approve", owner="bench", approvers={"role": "approver"})
    b.code("after", owner="bench", run={"callable": "bench_steps:stamp"})
    return b.build()


def open_engine(db: Path, synchronous: str = "FULL") -> Any:
    from statewright import Engine
    from statewright.store import open_store

    return Engine(open_store(store_url(db, synchronous)))


# --- (a) the floor and the engine ----------------------------------------------------------


def floor_ms_per_step(db: Path, n: int, synchronous: str = "FULL") -> float:
    """One INSERT + COMMIT per step, the engine's pragmas (WAL, the same synchronous)."""
    conn = sqlite3.connect(db, isolation_level=None, timeout=30.0)
    try:
        conn.execute("PRAGMA busy_timeout = 30000")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute(
            "CREATE TABLE IF NOT EXISTS steps (id INTEGER PRIMARY KEY, task_id TEXT NOT NULL,"
            " step INTEGER NOT NULL, body TEXT NOT NULL)"
        )
        t0 = time.perf_counter()
        for i in range(n):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO steps (task_id, step, body) VALUES (?, ?, ?)",
                (f"t-{i // STEPS:012d}", i % STEPS, FLOOR_BODY),
            )
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - t0
    finally:
        conn.close()
    return elapsed * 1000 / n


@dataclass(frozen=True)
class EngineRun:
    ms_per_step: float  # the worker draining the submitted tasks, per step
    ms_per_step_with_submit: float  # submits included, still per step
    cpu_ms_per_step: float  # CPU time of this process while the worker drained, per step
    steps: int


def engine_run(engine: Any, workflow: Any, n_tasks: int, **worker_options: Any) -> EngineRun:
    """Submit ``n_tasks`` tasks, then time one Worker draining them (STEPS steps each)."""
    from statewright import Worker

    t0 = time.perf_counter()
    ids = [engine.submit(workflow, {"n": i}) for i in range(n_tasks)]
    t1 = time.perf_counter()
    c1 = time.process_time()
    stats = Worker(engine, **worker_options).run(until_idle=True)
    c2 = time.process_time()
    t2 = time.perf_counter()
    steps = n_tasks * STEPS
    if stats.commands != steps:
        msg = f"the worker performed {stats.commands} commands, expected {steps}"
        raise RuntimeError(msg)
    for tid in (ids[0], ids[-1]):
        status = engine.state(tid).status.value
        if status != "completed":
            raise RuntimeError(f"task {tid} ended {status}, expected completed")
    return EngineRun((t2 - t1) * 1000 / steps, (t2 - t0) * 1000 / steps, (c2 - c1) * 1000 / steps, steps)


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def load_average() -> str:
    try:
        one, five, fifteen = os.getloadavg()
    except OSError:
        return "unknown"
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


# --- (d) pre-filling finished tasks --------------------------------------------------------


@dataclass(frozen=True)
class Template:
    task_id: str
    task: tuple[Any, ...]  # workflow, workflow_hash, status, version, state, created, updated
    events: list[tuple[int, str, str, str, int]]  # version, event_id, type, body, at_ms


def template_task(engine: Any, workflow: Any) -> Template:
    """Run one real task to completion and read its rows back as the template."""
    from statewright import Worker

    tid = engine.submit(workflow, {"n": 0})
    Worker(engine).run(until_idle=True)
    db = engine.store.path
    conn = sqlite3.connect(db)
    try:
        task = conn.execute(
            "SELECT workflow, workflow_hash, status, version, state, created_at_ms, updated_at_ms"
            " FROM sw_tasks WHERE task_id = ?", (tid,),
        ).fetchone()
        events = conn.execute(
            "SELECT version, event_id, type, body, at_ms FROM sw_events WHERE task_id = ? ORDER BY version",
            (tid,),
        ).fetchall()
    finally:
        conn.close()
    if task is None or task[2] != "completed":
        raise RuntimeError(f"template task {tid} did not complete")
    return Template(tid, tuple(task), [tuple(e) for e in events])


def prefill(db: Path, template: Template, count: int, *, batch: int = 5000) -> float:
    """Insert ``count`` finished tasks cloned from the template (new ids, as the engine makes
    them, for earlier submit times; correct hash chains) directly with SQL, in batches.
    Returns the seconds it took."""
    from statewright.runtime.engine import new_task_id
    from statewright.store.chain import GENESIS_HASH, Chain

    t0 = time.perf_counter()
    conn = sqlite3.connect(db, isolation_level=None, timeout=30.0)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    old = template.task_id
    wf, wf_hash, status, version, state, created, updated = template.task
    done = 0
    while done < count:
        n = min(batch, count - done)
        tasks, events = [], []
        for i in range(n):
            shift = (done + i + 1) * 1000  # each one submitted a second before the next
            tid = new_task_id(created - shift)  # an id as the engine makes it, at that time
            prev = GENESIS_HASH
            for ev_version, event_id, ev_type, body, at_ms in template.events:
                new_body, new_id = body.replace(old, tid), event_id.replace(old, tid)
                h = Chain().link(tid, ev_version, new_id, ev_type, at_ms - shift, prev, new_body)
                events.append((tid, ev_version, new_id, ev_type, new_body, at_ms - shift, prev, h))
                prev = h
            tasks.append((tid, wf, wf_hash, status, version, state.replace(old, tid), None, prev,
                          created - shift, updated - shift))
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(
            "INSERT INTO sw_tasks (task_id, workflow, workflow_hash, status, version, state, idem_key,"
            " last_hash, created_at_ms, updated_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", tasks,
        )
        conn.executemany(
            "INSERT INTO sw_events (task_id, version, event_id, type, body, at_ms, prev_hash, hash)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)", events,
        )
        conn.execute("COMMIT")
        done += n
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return time.perf_counter() - t0


def task_count(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM sw_tasks").fetchone()[0])
    finally:
        conn.close()


# --- child processes -----------------------------------------------------------------------


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BENCH_DIR), env.get("PYTHONPATH", "")) if p)
    env.pop("STATEWRIGHT_CRASH_AT", None)
    return env


def spawn_child(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(BENCH_DIR / "bench_child.py"), *args],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env(), cwd=str(REPO),
    )


def read_json_line(proc: subprocess.Popen[str]) -> dict[str, Any]:
    if proc.stdout is None:
        raise RuntimeError("child has no stdout")
    line = proc.stdout.readline()
    if not line:
        proc.wait()
        raise RuntimeError(f"child exited with status {proc.returncode} before reporting")
    data: dict[str, Any] = json.loads(line)
    return data


def run_workers(db: Path, synchronous: str, processes: int) -> dict[str, Any]:
    """Start ``processes`` worker processes on the database, release them together, and
    return the span from the first start to the last finish and the commands performed."""
    procs = [spawn_child("drain", store_url(db, synchronous)) for _ in range(processes)]
    try:
        ready = [read_json_line(p) for p in procs]
        for p in procs:
            if p.stdin is None:
                raise RuntimeError("child has no stdin")
            p.stdin.write("go\n")
            p.stdin.flush()
        done = [read_json_line(p) for p in procs]
    finally:
        for p in procs:
            p.wait(timeout=600)
    return {
        "span_seconds": max(d["t_end"] for d in done) - min(d["t_start"] for d in done),
        "commands": sum(int(d["commands"]) for d in done),
        "per_process": [int(d["commands"]) for d in done],
        "cpu_seconds": sum(float(d.get("cpu_seconds", 0.0)) for d in done),
        "hwm_kb_ready": [int(r["vm_hwm_kb"]) for r in ready],
        "hwm_kb_done": [int(d["vm_hwm_kb"]) for d in done],
    }


def bare_interpreter_hwm_kb(*modules: str) -> int:
    """VmHWM of a fresh ``python -c`` that imports ``modules`` (none: the bare interpreter)."""
    code = "".join(f"import {m}; " for m in modules) + (
        "from pathlib import Path; print([l.split()[1] for l in Path('/proc/self/status').read_text()"
        ".splitlines() if l.startswith('VmHWM')][0])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=child_env(), cwd=str(REPO))
    return int(out.stdout.strip())


def import_seconds(runs: int) -> list[float]:
    code = "import time; t = time.perf_counter(); import statewright; print(time.perf_counter() - t)"
    out = []
    for _ in range(runs):
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env=child_env(), cwd=str(REPO))
        out.append(float(res.stdout.strip()))
    return out


# --- (f) approval pickup -------------------------------------------------------------------


def approval_pickups(db: Path, rounds: int, *, seed: int = 7) -> list[float]:
    """An idle worker in another process; per round: submit, wait for the task to park,
    approve, and measure from approve() returning to the next step's callable starting."""
    engine = open_engine(db)
    admin = engine.users.authenticate(engine.users.bootstrap("root").token)
    engine.users.add(admin, "alice", ["approver"])
    alice = engine.users.authenticate(engine.users.issue_token(admin, "alice").token)
    wf = approval_workflow()
    rng = random.Random(seed)
    worker = spawn_child("idle", store_url(db))
    out: list[float] = []
    try:
        read_json_line(worker)  # ready
        for _ in range(rounds):
            tid = engine.submit(wf, {})
            _wait(lambda tid=tid: engine.store.load(tid).status == "awaiting_approval")
            time.sleep(rng.uniform(0.0, 0.05))  # approve at a random phase of the worker's idle poll
            shown = engine.state(tid).current
            engine.approve(tid, alice, proposal_hash=shown.proposal_hash if shown else "")
            returned = time.time()
            stamp = engine.workspace_root / tid / "started_at"
            _wait(stamp.exists)
            _wait(lambda tid=tid: engine.store.load(tid).status == "completed")
            out.append((float(stamp.read_text(encoding="utf-8")) - returned) * 1000)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        engine.close()
    return out


def _wait(cond: Any, timeout_seconds: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    while not cond():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out waiting in the approval benchmark")
        time.sleep(0.0005)


# --- the machine ---------------------------------------------------------------------------


def filesystem_of(path: Path) -> str:
    """Device and filesystem type of the mount that holds ``path`` (from /proc/mounts)."""
    best = ("", "?", "?")
    real = str(path.resolve())
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return "unknown"
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        dev, mnt, fstype = parts[0], parts[1], parts[2]
        if (real == mnt or real.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[0]):
            best = (mnt, dev, fstype)
    return f"{best[2]} on {best[1]} (mounted at {best[0]})"


def statewright_source() -> str:
    """Where ``import statewright`` comes from, and the repository commit when it is this one."""
    import statewright

    where = Path(statewright.__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "src"], cwd=REPO, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return str(where)
    if not where.is_relative_to(REPO):
        return f"{where} (not this repository's src/)"
    return f"{where} at git {sha}{' + uncommitted changes in src/' if dirty else ''}"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def fmt_list(values: Sequence[float], digits: int = 2) -> str:
    return ", ".join(f"{v:.{digits}f}" for v in values)
