"""Helpers for the runtime tests: workflow builders, worker runs, the effect script the
crash tests execute, and snapshots of what the database holds."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from statewright.cli import cli
from statewright.definition.loader import workflow_from_dict
from statewright.definition.model import Workflow
from statewright.runtime.engine import Engine
from statewright.runtime.worker import Worker, WorkerStats

# Imported by in-process workers through the ordinary import system: ``tests`` is on
# sys.path because pytest inserts the first directory above this package.
STEPS = "runtime.rt_steps"

EFFECT_SCRIPT = '''\
"""An idempotent external effect keyed by STATEWRIGHT_IDEMPOTENCY_KEY.

argv: OUT_DIR [PORT]. Every run appends its key to OUT_DIR/attempts.log. The effect is a
line in OUT_DIR/effects.log, written only for a key not seen before. With PORT and no
OUT_DIR/release file, the run first connects to 127.0.0.1:PORT, sends its key and blocks:
it goes on when it reads b"go" and exits 3 with no effect at end of file."""
import os
import socket
import sys
from pathlib import Path

out = Path(sys.argv[1])
key = os.environ["STATEWRIGHT_IDEMPOTENCY_KEY"]
with open(out / "attempts.log", "a") as f:
    f.write(key + "\\n")
if len(sys.argv) > 2 and not (out / "release").exists():
    with socket.create_connection(("127.0.0.1", int(sys.argv[2]))) as conn:
        conn.sendall(key.encode() + b"\\n")
        if conn.recv(16) != b"go":
            sys.exit(3)
effects = out / "effects.log"
done = effects.read_text().split() if effects.exists() else []
if key not in done:
    with open(effects, "a") as f:
        f.write(key + "\\n")
        f.flush()
        os.fsync(f.fileno())
print("effect", key, "already done" if key in done else "done")
'''


def workflow(name: str, *steps: Mapping[str, Any], **top: Any) -> Workflow:
    return workflow_from_dict({"workflow": name, "steps": [dict(s) for s in steps], **top}, f"<{name}>")


def code(step_id: str, fn: str, **extra: Any) -> dict[str, Any]:
    """A code step running ``rt_steps.<fn>`` in-process."""
    return {"id": step_id, "kind": "code", "owner": "tests", "run": {"callable": f"{STEPS}:{fn}"}, **extra}


def effect_workflow(script: Path, out: Path, *, port: int | None = None) -> Workflow:
    """charge -> notify, both running the effect script; with ``port``, charge blocks."""
    charge = [sys.executable, str(script), str(out)] + ([str(port)] if port is not None else [])
    notify = [sys.executable, str(script), str(out)]
    return workflow(
        "effects",
        {"id": "charge", "kind": "code", "owner": "payments", "run": {"command": charge}},
        {"id": "notify", "kind": "code", "owner": "payments", "run": {"command": notify}},
    )


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STATEWRIGHT_")}
    env.update(extra)
    return env


def worker_argv(db: Path, *, until_idle: bool = True) -> list[str]:
    argv = [sys.executable, "-m", "statewright", "worker", "--db", str(db), "--lease", "1"]
    return [*argv, "--until-idle"] if until_idle else argv


def statewright(*args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statewright", *args], env=dict(env or clean_env()),
        capture_output=True, text=True, timeout=60,
    )


def invoke(*args: str) -> Result:
    """The ``statewright`` command line, in this process."""
    return CliRunner().invoke(cli, list(args), catch_exceptions=True)


def drain(engine: Engine, **kwargs: Any) -> WorkerStats:
    """Run one worker until nothing is due *now* (a fake clock never moves by itself)."""
    return Worker(engine, **kwargs).run(until_idle=True)


def work_until(engine: Engine, done: Callable[[], bool], *, lease_seconds: float = 1.0,
               timeout_seconds: float = 30.0) -> WorkerStats:
    """Run a worker on the engine's clock until ``done()``. With the system clock the
    worker itself waits for due times (an expired lease, a backoff); the timeout only
    bounds a broken run."""
    deadline = time.monotonic() + timeout_seconds
    return Worker(engine, lease_seconds=lease_seconds).run(
        until=lambda: done() or time.monotonic() > deadline
    )


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split() if path.exists() else []


def snapshot(db: Path | str) -> dict[str, Any]:
    """Every row statewright keeps, for before/after comparisons, on any backend."""
    tables = ("sw_tasks", "sw_events", "sw_outbox", "sw_timers", "sw_definitions")
    if str(db).startswith("memory:"):
        from statewright.store.memory import MemoryStore

        mem = MemoryStore(str(db)).db  # its rows are immutable: copies of the tables hold them
        return {name: dict(getattr(mem, name)) for name in ("tasks", "events", "outbox", "timers", "definitions")}
    if str(db).startswith("postgresql://"):
        from store.backends import raw_sql

        return {table: raw_sql(str(db), f"SELECT * FROM {table} ORDER BY 1, 2") for table in tables}
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY 1, 2").fetchall()
            for table in tables
        }
    finally:
        conn.close()


def sql(db: Path, statement: str, params: tuple[Any, ...] = ()) -> None:
    """Edit the database behind statewright's back (what verify must catch)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute(statement, params)
    finally:
        conn.close()
